import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { printSummary, recordFigure, recordTarget, summarySection } from '../../bench/summary';

/** Runs `body` with console.log captured, and returns what it printed. */
function captured(body: () => void): string[] {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => void lines.push(args.join(' '));
  try {
    body();
  } finally {
    console.log = log;
  }
  return lines;
}

describe('the benchmark summary table', () => {
  it('prints each target where it is measured and ends the run with every figure, met or missed', () => {
    const atTargets = captured(() => {
      summarySection('redis');
      recordTarget('uncontended cycles/s vs the best peer', 0.95, '>=', 0.9);
      recordTarget('flash-sale makespan vs the best peer', 0.25, '<=', 0.1);
      summarySection('memory');
      recordFigure('uncontended cycles/s', '17,000');
    });
    assert.deepEqual(atTargets, [
      'target uncontended cycles/s vs the best peer >= 0.9x: 0.95x MET',
      'target flash-sale makespan vs the best peer <= 0.1x: 0.25x MISSED',
    ]);
    const table = captured(printSummary);
    assert.equal(table[1].replace(/ +/g, ' '), '| section | measure | value | target | verdict |');
    const rows = table.slice(3).map((line) => line.split('|').map((cell) => cell.trim()).filter(Boolean));
    assert.deepEqual(rows, [
      ['redis', 'uncontended cycles/s vs the best peer', '0.95x', '>= 0.9x', 'met'],
      ['redis', 'flash-sale makespan vs the best peer', '0.25x', '<= 0.1x', 'MISSED'],
      ['memory', 'uncontended cycles/s', '17,000'],
    ]);
  });
});
