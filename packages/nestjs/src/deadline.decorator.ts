/**
 * `@Deadline()`: a controller's or a route's own budget limits (its SLA), or `false` for a long-lived route.
 */
import type { RouteLimits } from '@deadline/server';
import { resolveLimits } from '@deadline/server/internal';
import { SetMetadata } from '@nestjs/common';

/** The metadata key `@Deadline()` writes. @internal */
export const DEADLINE_LIMITS = 'deadline:limits';

/**
 * A controller's or a route handler's own limits, over the module's: its requests' deadline is narrowed to them,
 * never widened (the earlier deadline wins; a route's own decorator over its controller's). `false` makes the route
 * long-lived — server-sent events (`@Sse()`), a long poll, a stream: no default budget, never answered 504 nor cut;
 * a caller's budget, if one came, still bounds its outgoing calls. The limits are checked when the class is defined.
 *
 * @example
 * ```ts
 * @Controller('reports')
 * @Deadline({ defaultMs: 5_000, maxMs: 10_000 })
 * export class ReportsController {
 *   @Get('live')
 *   @Sse()
 *   @Deadline(false)
 *   live() {
 *     return interval(1_000).pipe(map((n) => ({ data: n })));
 *   }
 * }
 * ```
 */
export function Deadline(limits: RouteLimits | false): ClassDecorator & MethodDecorator {
  // A bad value throws here, naming the field: the app does not start.
  if (limits !== false) resolveLimits(limits, undefined, '@Deadline() ');
  return SetMetadata(DEADLINE_LIMITS, limits);
}
