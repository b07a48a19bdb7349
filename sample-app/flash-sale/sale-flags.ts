export interface SaleFlags {
  backend: string;
  processes: number;
  buyers: number;
  stock: number;
  /** false with --no-lock: the same sale without the lock, to show what it prevents. */
  lock: boolean;
  /** One line of JSON instead of the table (for tests and scripts). */
  json: boolean;
  sku: string;
}

const USAGE =
  'usage: npm start -- [--backend memory|redis|redlock|etcd|zookeeper|postgres] [--processes N] [--buyers N] [--stock N] [--no-lock] [--json]';

export function parseSaleFlags(argv: string[]): SaleFlags {
  const flags: SaleFlags = { backend: 'memory', processes: 1, buyers: 1000, stock: 300, lock: true, json: false, sku: 'flash-sale-item' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${flag} needs a value\n${USAGE}`);
      return next;
    };
    const count = (min: number) => {
      const parsed = Number(value());
      if (!Number.isInteger(parsed) || parsed < min) throw new Error(`${flag} must be a whole number of at least ${min}\n${USAGE}`);
      return parsed;
    };
    switch (flag) {
      case '--backend':
        flags.backend = value();
        break;
      case '--processes':
        flags.processes = count(1);
        break;
      case '--buyers':
        flags.buyers = count(1);
        break;
      case '--stock':
        flags.stock = count(0);
        break;
      case '--no-lock':
        flags.lock = false;
        break;
      case '--json':
        flags.json = true;
        break;
      case '--sku':
        flags.sku = value();
        break;
      default:
        throw new Error(`unknown flag ${flag}\n${USAGE}`);
    }
  }
  return flags;
}
