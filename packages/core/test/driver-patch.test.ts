/**
 * The one way adapters patch a driver's prototypes (core's patchOnce, replaceMethods): once per process under a
 * key, later calls only reconfigure, undo puts back only what is still ours.
 */
import { describe, expect, it } from 'vitest';
import { type DriverPatch, patchOnce, replaceMethods } from '../src/internal.ts';

interface TestPatch extends DriverPatch<string> {
  readonly seen: string[];
}

function driver() {
  class Client {
    query(sql: string): string {
      return `driver: ${sql}`;
    }
  }
  return Client;
}

function patch(Client: ReturnType<typeof driver>, options: string, events: string[] = []) {
  const original = Client.prototype.query;
  return patchOnce<string, TestPatch>(
    Client.prototype,
    Symbol.for('test/driver-patch'),
    options,
    (state) =>
      replaceMethods(Client.prototype, {
        query(this: InstanceType<typeof Client>, sql: string) {
          if (!state.enabled) return original.call(this, sql);
          state.seen.push(sql);
          return `${state.options}: ${original.call(this, sql)}`;
        },
      }),
    { seen: [] },
    { reconfigured: () => events.push('reconfigured'), turnedOff: () => events.push('off') },
  );
}

describe('patchOnce', () => {
  it('installs once; a later call sets the options and returns the same undo; undo puts the method back', () => {
    const Client = driver();
    const original = Client.prototype.query;
    const events: string[] = [];
    const undo = patch(Client, 'first', events);
    expect(new Client().query('select 1')).toBe('first: driver: select 1');
    expect(patch(Client, 'second', events)).toBe(undo);
    expect(new Client().query('select 2')).toBe('second: driver: select 2');
    expect(events).toEqual(['reconfigured']);
    undo();
    expect(events).toEqual(['reconfigured', 'off']);
    expect(Client.prototype.query).toBe(original);
    expect(Object.getOwnPropertySymbols(Client.prototype)).toEqual([]);
    // Installed anew after an undo.
    const again = patch(Client, 'third');
    expect(again).not.toBe(undo);
    expect(new Client().query('x')).toBe('third: driver: x');
    again();
  });

  it('a patch made on top of ours keeps working after our undo: ours passes through, the key stays', () => {
    const Client = driver();
    const undo = patch(Client, 'ours');
    const ours = Client.prototype.query;
    Client.prototype.query = function apm(this: InstanceType<typeof Client>, sql: string) {
      return `apm(${ours.call(this, sql)})`;
    };
    undo();
    expect(new Client().query('q')).toBe('apm(driver: q)');
    // Still registered: a later call turns ours back on beneath the APM's.
    patch(Client, 'back');
    expect(new Client().query('q')).toBe('apm(back: driver: q)');
  });
});

describe('replaceMethods', () => {
  it('an inherited method is put back by deleting ours; an own one by restoring it', () => {
    class Base {
      inherited(): string {
        return 'base';
      }
    }
    const prototype = Object.create(Base.prototype) as Base & { own(): string };
    prototype.own = () => 'own';
    const restore = replaceMethods(prototype, { inherited: () => 'ours', own: () => 'ours' });
    expect(prototype.inherited()).toBe('ours');
    expect(restore()).toBe(true);
    expect(Object.hasOwn(prototype, 'inherited')).toBe(false);
    expect(prototype.own()).toBe('own');
  });
});
