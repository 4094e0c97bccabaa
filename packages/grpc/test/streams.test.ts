/**
 * Streaming calls under the deadline, through grpc-js: the shared suite's (test/support/rpc-client-conformance.ts)
 * — a server stream is bounded as a whole by its call's deadline, and a caller that cancels mid-stream (itself, or
 * through its request's context) stops the server's work. grpc-js has nothing of its own to add here.
 */
import { rpcStreamConformance } from '../../../test/support/rpc-client-conformance.ts';
import { grpcDriver } from './support.ts';

rpcStreamConformance(grpcDriver);
