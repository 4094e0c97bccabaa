/**
 * `@deadline/nestjs/microservices` — a Nest microservice client whose messages carry the request's remaining budget
 * and trace, and whose wait for a reply ends with the request. The servers' side needs nothing from here:
 * `DeadlineModule` runs each message handler inside its caller's budget.
 * @packageDocumentation
 */

export { type MessageClient, type MessageClientOptions, withDeadline } from './with-deadline.js';
