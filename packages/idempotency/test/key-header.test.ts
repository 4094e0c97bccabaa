/**
 * The `Idempotency-Key` header parser: structured-field strings and bare values, property-tested.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_KEY_LENGTH, parseIdempotencyKey } from '../src/key-header.js';

const visible = fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c));
const keys = fc.string({ minLength: 1, maxLength: MAX_KEY_LENGTH, unit: visible });
/** A key as an sf-string: quotes and backslashes escaped. */
const quote = (key: string) => `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

describe('parseIdempotencyKey', () => {
  it('reads any visible-ASCII key of 1 to 255 characters, quoted as an sf-string', () => {
    fc.assert(
      fc.property(keys, (key) => {
        expect(parseIdempotencyKey(quote(key))).toEqual({ kind: 'key', key });
        expect(parseIdempotencyKey([quote(key)])).toEqual({ kind: 'key', key });
        expect(parseIdempotencyKey(`${quote(key)};p=1`)).toEqual({ kind: 'key', key });
      }),
    );
  });

  it('reads a bare value as the key itself (trimmed), unless it starts with a quote', () => {
    fc.assert(
      fc.property(keys, (key) => {
        const trimmed = key.trim();
        fc.pre(trimmed.length > 0 && !trimmed.startsWith('"'));
        expect(parseIdempotencyKey(` ${key} `)).toEqual({ kind: 'key', key: trimmed });
      }),
    );
  });

  it('never throws; anything it accepts is 1 to 255 visible ASCII characters', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ unit: 'binary', maxLength: 400 }), fc.array(fc.string(), { maxLength: 3 })),
        (value) => {
          const read = parseIdempotencyKey(value);
          if (read.kind === 'key') {
            expect(read.key.length).toBeGreaterThan(0);
            expect(read.key.length).toBeLessThanOrEqual(MAX_KEY_LENGTH);
            expect(read.key).toMatch(/^[\x20-\x7e]+$/);
          }
        },
      ),
    );
  });

  it('refuses what is not one key, saying why', () => {
    expect(parseIdempotencyKey(undefined)).toEqual({ kind: 'absent' });
    expect(parseIdempotencyKey([])).toEqual({ kind: 'absent' });
    const reasons = ['', '  ', '""', '"abc', '"a\\b"', '"abc" x', 'k'.repeat(256), 'caf\u00e9', ['a', 'b']].map(
      (value) => {
        const read = parseIdempotencyKey(value);
        expect(read.kind).toBe('invalid');
        return read.kind === 'invalid' ? read.reason : '';
      },
    );
    expect(reasons).toMatchInlineSnapshot(`
      [
        "the Idempotency-Key header is empty",
        "the Idempotency-Key header is empty",
        "the Idempotency-Key is an empty string",
        "the quoted Idempotency-Key has no closing quote",
        "the quoted Idempotency-Key has an escape other than \\" or \\\\",
        "the Idempotency-Key has text after its closing quote",
        "the Idempotency-Key is longer than 255 characters",
        "the Idempotency-Key holds characters other than visible ASCII and space",
        "more than one Idempotency-Key header",
      ]
    `);
  });
});
