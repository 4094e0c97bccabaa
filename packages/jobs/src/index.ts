/**
 * `@deadline/jobs` — background work that escapes the request's deadline on purpose and keeps its trace:
 * detached tasks under their own budget, a graceful drain on shutdown, BullMQ jobs that carry the trace (not the
 * request's deadline). The cls-hooked bridge is `@deadline/jobs/cls-hooked`.
 * @packageDocumentation
 */

export {
  Background,
  type BackgroundOptions,
  background,
  type DrainReport,
  drain,
  type RunInBackgroundOptions,
  runInBackground,
  type TaskOutcome,
} from './background.js';
export {
  type EnqueueOptions,
  enqueue,
  type JobContextOptions,
  type JobLike,
  type QueueLike,
  withJobContext,
} from './bullmq.js';
export { JOB_CONTEXT_KEY } from './carrier.js';
export { type FastifyBackgroundOptions, fastifyBackground } from './fastify.js';
export type { LoggerLike } from './logger.js';
export { type ClosableServer, type CloseAndDrainOptions, closeAndDrain, type ShutdownReport } from './shutdown.js';
