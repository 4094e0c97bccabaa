/**
 * Which connections a side connection's KILLs may reach (server-run.ts), without a server: a run is its identity
 * and when it had surely started; a connection, where and when it was first seen alive.
 */
import { describe, expect, it } from 'vitest';
import { RunLog, type ServerRun } from '../src/server-run.ts';

const PEER = '127.0.0.1:3306 10.11.6-MariaDB';
const primary: ServerRun = { server: 'db:3306:1', startedBy: 1_000 };
/** A standby up since long before: its run's start alone would let KILLs through for the primary's connections. */
const standby: ServerRun = { server: 'db:3307:1', startedBy: 500 };

describe('RunLog: the run each side connection reached', () => {
  it('one server: connections seen alive after its run started, at the same peer', () => {
    const aim = new RunLog().arrive(primary, PEER, 5_000);
    expect(aim.reaches({ at: 2_000, peer: PEER })).toBe(true);
    expect(aim.reaches({ at: 900, peer: PEER })).toBe(false); // an earlier run's
    expect(aim.reaches({ at: 2_000, peer: '127.0.0.1:3307 10.11.6-MariaDB' })).toBe(false);
    expect(aim.reaches(undefined)).toBe(false);
  });

  it('after a failover: only connections seen since a side connection began to connect to the standby', () => {
    const runs = new RunLog();
    runs.arrive(primary, PEER, 1_500);
    const first = runs.arrive(standby, PEER, 8_000);
    expect(first.reaches({ at: 2_000, peer: PEER })).toBe(false); // the primary's
    expect(first.reaches({ at: 9_000, peer: PEER })).toBe(true);
  });

  it('after a failover, every later side connection to the standby too (a spare, opened while a KILL was held up)', () => {
    const runs = new RunLog();
    runs.arrive(primary, PEER, 1_500);
    runs.arrive(standby, PEER, 8_000);
    const spare = runs.arrive(standby, PEER, 8_200);
    // Seen on the primary before the failover: a KILL for its thread id would reach another connection.
    expect(spare.reaches({ at: 2_000, peer: PEER })).toBe(false);
    expect(spare.reaches({ at: 9_000, peer: PEER })).toBe(true);
  });

  it('back on the primary (failed back), its connections of before the failover stay out of reach', () => {
    const runs = new RunLog();
    runs.arrive(primary, PEER, 1_500);
    runs.arrive(standby, PEER, 8_000);
    const back = runs.arrive(primary, PEER, 12_000);
    expect(back.reaches({ at: 9_000, peer: PEER })).toBe(false); // the standby's
    expect(back.reaches({ at: 13_000, peer: PEER })).toBe(true);
  });
});
