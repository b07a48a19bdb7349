import { compileLockKey, type LockKeyResolver, type LockKeyTemplate } from './lock-key';
import { assertSemaphoreLimit, DEFAULT_LOCK_OPTIONS, MAX_TIMER_MS, resolveRunOptions, SEMAPHORE_DECORATOR_FIELDS, type RunOptions } from './lock-options';
import { LockService, type LockNames } from './lock.service';
import { LockKeyError } from './errors';
import { noteMinHold } from './schedule-checks';

/**
 * Runs the method holding the lock named by `template`, resolved from the call's arguments:
 * `'stock:<0>'` is argument 0, `'order:<1.id>'` the `id` of argument 1; a function of the
 * arguments is the escape hatch. The method then returns a Promise, even if it was synchronous;
 * with `onTimeout: 'skip'` it resolves to `undefined` when the lock stays busy.
 *
 * The method is wrapped when the class is defined (a Proxy, so name and length are kept) and
 * the original's reflect-metadata is copied onto the wrapper, so Nest decorators (@Get, @Cron,
 * @MessagePattern...) work above or below this one, on any provider, not only controllers.
 */
export function WithLock(template: LockKeyTemplate | readonly LockKeyTemplate[], options?: RunOptions): MethodDecorator {
  return lockedMethod('@WithLock', template, options);
}

/**
 * Runs the method holding one permit of the semaphore named by `template` (resolved as
 * @WithLock's): at most `limit` calls run at once across every process, first come first served.
 */
export function WithSemaphore(template: LockKeyTemplate, limit: number, options?: Omit<RunOptions, 'mode'>): MethodDecorator {
  assertSemaphoreLimit(limit);
  return lockedMethod('@WithSemaphore', template, options, limit);
}

/** The decorator of @WithLock and @WithSemaphore; `limit` for a semaphore. */
function lockedMethod(decorator: string, template: LockKeyTemplate | readonly LockKeyTemplate[], options: RunOptions | undefined, limit?: number): MethodDecorator {
  return (target, propertyKey, descriptor: PropertyDescriptor) => {
    // A static method's target is the class itself; an instance method's, its prototype.
    const owner = typeof target === 'function' ? target : (target as object).constructor;
    const method = `${owner.name}.${String(propertyKey)}`;
    const original = descriptor.value;
    if (typeof original !== 'function') {
      throw new TypeError(`${decorator} can only decorate methods; ${method} is not one.`);
    }
    const resolveName = compileNames(template, method);
    // A bad option fails here, when the class is defined. The module's ttl is not known yet,
    // so renewIntervalMs and minHoldMs are checked against the call's own ttlMs only (again at each call).
    resolveRunOptions(options, { ...DEFAULT_LOCK_OPTIONS, ttlMs: MAX_TIMER_MS }, false, limit === undefined ? undefined : SEMAPHORE_DECORATOR_FIELDS);
    const wrapped = new Proxy(original, {
      apply(fn, thisArg, args: unknown[]) {
        let name: LockNames;
        let service: LockService;
        try {
          name = resolveName(args);
          service = LockService.forDecorator(method);
        } catch (error) {
          return Promise.reject(error);
        }
        return service.runForDecorator(name, () => Reflect.apply(fn, thisArg, args), options, method, limit);
      },
    });
    copyMetadata(original, wrapped);
    descriptor.value = wrapped;
    noteMinHold(target, propertyKey, method, options?.minHoldMs);
    return descriptor;
  };
}

/** One template's resolver, or, for a list of templates, one that resolves each (several names at once). */
function compileNames(template: LockKeyTemplate | readonly LockKeyTemplate[], method: string): (args: readonly unknown[]) => LockNames {
  if (!Array.isArray(template)) return compileLockKey(template as LockKeyTemplate, method);
  if (template.length === 0) throw new LockKeyError(`@WithLock on ${method}: the list of templates is empty; give at least one.`, '[]', method);
  const resolvers: LockKeyResolver[] = template.map((each: LockKeyTemplate) => compileLockKey(each, method));
  return (args) => resolvers.map((resolve) => resolve(args));
}

/** Metadata lives in a WeakMap keyed by the function object, so the Proxy needs its own copy. */
function copyMetadata(from: object, to: object): void {
  for (const key of Reflect.getOwnMetadataKeys(from)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, from), to);
  }
}
