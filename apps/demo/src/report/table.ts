/**
 * A scenario's measured table, as boxed text for the terminal. The same tables go into the HTML report.
 */

/** One scenario's results: what the demo measured, or why it could not. */
export interface ScenarioTable {
  id: number;
  title: string;
  /** What to read in the table, printed below it. */
  note?: string | undefined;
  columns: string[];
  rows: (string | number | null)[][];
  /** Why the scenario did not run (e.g. no Postgres): then only the title and this are shown. */
  skipped?: string | undefined;
}

/** Shown for a missing value (`null`), so that it cannot be mistaken for a zero or an empty string. */
const MISSING = '—';

/**
 * A cell as text. Numbers: whole ones as they are; others to 0.1, the precision the logs measure time in.
 */
export function formatCell(value: unknown): string {
  if (value === null || value === undefined) return MISSING;
  if (typeof value === 'number') {
    return Number.isInteger(value) || !Number.isFinite(value) ? String(value) : String(Math.round(value * 10) / 10);
  }
  try {
    return String(value);
  } catch {
    // An object whose toString throws: a cell shows it was there, not why.
    return '?';
  }
}

/** Whether a column holds numbers (every cell a number or missing, one at least a number): right-aligned. */
export function numericColumns(table: ScenarioTable): boolean[] {
  return Array.from({ length: columnCount(table) }, (_, column) => {
    const cells = rowsOf(table).map((row) => row[column]);
    return (
      cells.some((cell) => typeof cell === 'number') && cells.every((cell) => typeof cell === 'number' || cell == null)
    );
  });
}

/** Rows may be ragged: the widest row (or the header) sets how many columns there are, none is cut. */
export function columnCount(table: ScenarioTable): number {
  return rowsOf(table).reduce((count, row) => Math.max(count, row.length), columnsOf(table).length);
}

/**
 * The table as boxed text: `<id>. <title>` above, the box (columns fitted to their widest cell, numbers
 * right-aligned, null as `—`), the note below. A skipped table is its title and `skipped: <reason>`.
 * Every line of the box has the same length (in code points).
 *
 * @example
 * ```text
 * 1. Client gives up at 300 ms
 * +---------------------+-----------+
 * | mode                | dead work |
 * +---------------------+-----------+
 * | propagated deadline |         0 |
 * +---------------------+-----------+
 * ```
 */
export function renderTableText(table: ScenarioTable): string {
  const heading = oneLine(`${formatCell(table.id)}. ${formatCell(table.title)}`);
  if (table.skipped !== undefined) return `${heading}\n  skipped: ${oneLine(formatCell(table.skipped))}`;
  const count = columnCount(table);
  const lines = [heading, ...(count === 0 ? ['(no columns)'] : box(table, count))];
  if (table.note !== undefined) lines.push(multiLine(formatCell(table.note)));
  return lines.join('\n');
}

function box(table: ScenarioTable, count: number): string[] {
  const numeric = numericColumns(table);
  const header = Array.from({ length: count }, (_, i) => oneLine(formatCell(columnsOf(table)[i] ?? '')));
  const body = rowsOf(table).map((row) =>
    Array.from({ length: count }, (_, i) => (i < row.length ? oneLine(formatCell(row[i])) : '')),
  );
  const widths = header.map((title, i) =>
    body.reduce((width, row) => Math.max(width, length(row[i] ?? '')), length(title)),
  );
  const rule = `+${widths.map((width) => '-'.repeat(width + 2)).join('+')}+`;
  const line = (cells: string[]) =>
    `|${cells.map((cell, i) => ` ${pad(cell, widths[i] ?? 0, numeric[i] === true)} `).join('|')}|`;
  return [rule, line(header), rule, ...body.map(line), ...(body.length > 0 ? [rule] : [])];
}

function columnsOf(table: ScenarioTable): readonly unknown[] {
  return Array.isArray(table.columns) ? table.columns : [];
}

function rowsOf(table: ScenarioTable): readonly (readonly unknown[])[] {
  return Array.isArray(table.rows) ? table.rows.filter((row) => Array.isArray(row)) : [];
}

/** Lengths in code points: a character outside the BMP takes one column, not two. */
function length(text: string): number {
  return Array.from(text).length;
}

function pad(text: string, width: number, right: boolean): string {
  const fill = ' '.repeat(Math.max(0, width - length(text)));
  return right ? fill + text : text + fill;
}

/**
 * Text from a scenario on one line: a line break would split the box. Control and format characters (which could
 * move the cursor or recolour the terminal) and lone surrogates become '?'.
 */
function oneLine(text: string): string {
  return multiLine(text).replace(/\n/g, ' ');
}

function multiLine(text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu, (char) =>
    char === '\n' ? char : char === '\t' ? ' ' : '?',
  );
}
