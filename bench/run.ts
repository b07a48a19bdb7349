/**
 * `npm run bench [-- redis etcd zookeeper]`: each section starts its own throwaway servers on
 * free loopback ports, runs this library and its peers on the same server in one run, and
 * prints medians and ratios. Absolute numbers move on a shared machine; ratios are the result.
 */
import 'reflect-metadata';
import { enterSection } from './progress';
import { printSummary, summarySection } from './summary';

type Section = { name: string; run: () => Promise<void> };

/** Backends add their section here. */
const SECTIONS: Section[] = [
  { name: 'memory', run: () => import('./memory.bench').then((m) => m.run()) },
  { name: 'decorator', run: () => import('./decorator.bench').then((m) => m.run()) },
  { name: 'diagnostics', run: () => import('./diagnostics.bench').then((m) => m.run()) },
  { name: 'redis', run: () => import('./redis.bench').then((m) => m.run()) },
  { name: 'redlock', run: () => import('./redlock.bench').then((m) => m.run()) },
  { name: 'etcd', run: () => import('./etcd.bench').then((m) => m.run()) },
  { name: 'zookeeper', run: () => import('./zookeeper.bench').then((m) => m.run()) },
  { name: 'postgres', run: () => import('./postgres.bench').then((m) => m.run()) },
  { name: 'primitives', run: () => import('./primitives.bench').then((m) => m.run()) },
  { name: 'scale', run: () => import('./scale.bench').then((m) => m.run()) },
  { name: 'burst', run: () => import('./burst.bench').then((m) => m.run()) },
  { name: 'cold', run: () => import('./cold-process.bench').then((m) => m.run()) },
];

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const chosen = wanted.length ? SECTIONS.filter((s) => wanted.includes(s.name)) : SECTIONS;
  if (chosen.length === 0) {
    console.error(`no benchmark section among: ${SECTIONS.map((s) => s.name).join(', ') || '(none yet)'}`);
    process.exit(1);
  }
  console.log(`node ${process.version}, ${require('node:os').cpus().length} cores, ${new Date().toISOString()}`);
  for (const [index, section] of chosen.entries()) {
    console.log(`\n== ${section.name} ==`);
    enterSection(section.name, index, chosen.length);
    summarySection(section.name);
    await section.run();
  }
  printSummary();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
