/**
 * The few pieces every chart of the project is drawn with (the overload benchmark's, the soak's timeline): plain
 * strings of SVG, no dependencies.
 */

/**
 * Text made safe to put inside an SVG element or attribute.
 *
 * @example
 * ```ts
 * escapeXml('p99 < 2 s & rising'); // 'p99 &lt; 2 s &amp; rising'
 * ```
 */
export const escapeXml = (text: string): string =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/**
 * A coordinate to one decimal, as SVG is written (a smaller file, no visible difference).
 *
 * @example
 * ```ts
 * fixed(12.345); // '12.3'
 * ```
 */
export const fixed = (x: number): string => (Math.round(x * 10) / 10).toString();

/**
 * A round axis maximum at or above `x`, and a tick step that divides it into 4–6 parts.
 *
 * @example
 * ```ts
 * niceScale(173); // { max: 200, step: 40 }
 * ```
 */
export function niceScale(x: number): { max: number; step: number } {
  if (!(x > 0)) return { max: 1, step: 0.2 };
  const magnitude = 10 ** Math.floor(Math.log10(x));
  const steps: [number, number][] = [
    [1, 0.2],
    [1.5, 0.3],
    [2, 0.4],
    [2.5, 0.5],
    [3, 0.5],
    [4, 1],
    [5, 1],
    [6, 1],
    [8, 2],
    [10, 2],
  ];
  for (const [m, step] of steps) if (m * magnitude >= x) return { max: m * magnitude, step: step * magnitude };
  return { max: 10 * magnitude, step: 2 * magnitude };
}

/**
 * A `<text>` element at (x, y) with escaped content.
 *
 * @example
 * ```ts
 * svgText(70, 26, 'Soak timeline', 'font-size="16"');
 * ```
 */
export function svgText(x: number, y: number, content: string, attributes = ''): string {
  return `<text x="${fixed(x)}" y="${fixed(y)}" ${attributes}>${escapeXml(content)}</text>`;
}
