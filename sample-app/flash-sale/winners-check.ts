/**
 * Whether the store's winners are exactly the buyers who were told they won: each recorded
 * once, none missing, none extra. A winner recorded by a refused write, or twice, shows here.
 */
export interface WinnersCheck {
  /** Entries in the store's list of winners. */
  recorded: number;
  /** Entries naming a buyer already listed. */
  duplicates: number;
  /** Buyers told they won whom the store does not list. */
  missing: number;
  /** Listed buyers who were never told they won. */
  unexpected: number;
  exact: boolean;
}

export function checkWinners(told: string[], recorded: string[]): WinnersCheck {
  const toldSet = new Set(told);
  const recordedSet = new Set(recorded);
  const duplicates = recorded.length - recordedSet.size;
  const missing = [...toldSet].filter((user) => !recordedSet.has(user)).length;
  const unexpected = [...recordedSet].filter((user) => !toldSet.has(user)).length;
  const exact = duplicates === 0 && missing === 0 && unexpected === 0 && recorded.length === told.length;
  return { recorded: recorded.length, duplicates, missing, unexpected, exact };
}
