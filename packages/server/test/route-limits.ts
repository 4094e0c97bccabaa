/**
 * A route's (or a router's) own mount of a middleware narrows the request's deadline, never widens it — the same
 * check for every adapter whose routes mount it again (Express, Koa, Hono). The app under test mounts the middleware
 * with `defaultMs: 2_000, maxMs: 4_000`, trusting callers that send `x-internal: 1`, and two routes of its own: `narrow`
 * (`defaultMs: 300, maxMs: 500`, no `trust`), answering `{ budgetMs, left }`, and `generous` (`defaultMs: 3_000`),
 * answering `{ left }`.
 */
import { request } from 'undici';
import { expect } from 'vitest';

export async function expectRouteLimitsNarrow(url: string, paths: { narrow: string; generous: string }): Promise<void> {
  const report = (await (await request(`${url}${paths.narrow}`)).body.json()) as { budgetMs: number; left: number };
  expect(report.budgetMs).toBe(300);
  expect(report.left).toBeLessThanOrEqual(300);
  // The route has no `trust` of its own: the app's verdict on the caller holds.
  const trusted = { 'x-request-deadline': '3000', 'x-internal': '1' };
  const clamped = await request(`${url}${paths.narrow}`, { headers: trusted });
  expect(((await clamped.body.json()) as { budgetMs: number }).budgetMs).toBe(500);
  const outside = await request(`${url}${paths.narrow}`, { headers: { 'x-request-deadline': '3000' } });
  expect(((await outside.body.json()) as { budgetMs: number }).budgetMs).toBe(300);
  const generous = (await (await request(`${url}${paths.generous}`)).body.json()) as { left: number };
  expect(generous.left).toBeLessThanOrEqual(2_000); // the app's 2 s default still holds
}
