/**
 * Whether V8 reads the objects of a framework that swaps each request's prototype (express, `setPrototypeOf` to
 * `app.request`) slowly: on Node 20 and 22 (V8 11, 12) such an object shares no hidden class with the next one, a
 * property added to it is a slow runtime call, and a property it lacks walks the whole prototype chain with every
 * cache missing; from Node 24 on (V8 13) its reads and writes are cached like any object's. The server and its
 * adapters choose, per Node, between reading such a request and going around it (callgrind, express: see
 * docs/benchmarks.md).
 * @internal
 */
export const READS_OF_SWAPPED_REQUESTS_ARE_SLOW = Number(process.versions.node.split('.')[0]) < 24;
