/**
 * A dispatcher that sends through another one, of this undici or of any other: `close()` and `destroy()`, in
 * every form undici's types allow (a promise, or a callback), go to that one. `ForeignDispatcher` and
 * `DeadlineDispatcher` are such dispatchers.
 */
import { Dispatcher } from 'undici';

/** The part of a dispatcher of any undici used here. @internal */
export interface AnyDispatcher {
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean;
  close(): Promise<void>;
  destroy(error?: Error | null): Promise<void>;
}

/** @internal */
export abstract class SendingDispatcher<Inner extends AnyDispatcher> extends Dispatcher {
  /** The dispatcher requests are sent through. */
  protected readonly inner: Inner;

  constructor(inner: Inner) {
    super();
    this.inner = inner;
  }

  override close(): Promise<void>;
  override close(callback: () => void): void;
  override close(callback?: () => void): Promise<void> | undefined {
    const closed = this.inner.close();
    if (callback === undefined) return closed;
    closed.then(callback, callback);
    return undefined;
  }

  override destroy(): Promise<void>;
  override destroy(error: Error | null): Promise<void>;
  override destroy(callback: () => void): void;
  override destroy(error: Error | null, callback: () => void): void;
  override destroy(errorOrCallback?: Error | null | (() => void), callback?: () => void): Promise<void> | undefined {
    const error = typeof errorOrCallback === 'function' ? null : errorOrCallback;
    const done = typeof errorOrCallback === 'function' ? errorOrCallback : callback;
    const destroyed = this.inner.destroy(error ?? null);
    if (done === undefined) return destroyed;
    destroyed.then(done, done);
    return undefined;
  }
}
