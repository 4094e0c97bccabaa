/**
 * A short, safe rendering of any value for error messages: never throws, never prints a megabyte,
 * and keeps control characters out of log lines.
 */
export function describeValue(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value);
    case 'number':
    case 'boolean':
    case 'bigint':
    case 'undefined':
      return String(value);
    case 'symbol':
      return value.toString();
    case 'function':
      return `function ${value.name || '(anonymous)'}`;
    default:
      if (value === null) return 'null';
      if (Array.isArray(value)) return `an array of ${value.length}`;
      return `an object (${Object.prototype.toString.call(value).slice(8, -1)})`;
  }
}
