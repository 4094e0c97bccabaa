/**
 * `DeadlineModule`: one import gives a Nest app — on express or on fastify — a request budget honoured end to end.
 */
import { type DynamicModule, type InjectionToken, Module, type ModuleMetadata } from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { DeadlineExceptionFilter } from './exception-filter.js';
import { DeadlineInterceptor } from './interceptor.js';
import { mountOnPlatform } from './mount.js';
import { DEADLINE_OPTIONS, DEADLINE_SETUP, type DeadlineModuleOptions, type ModuleSetup, setUp } from './options.js';

/**
 * Options of {@link DeadlineModule.forRootAsync}: the module's options from a factory, with what it injects.
 *
 * @example
 * ```ts
 * DeadlineModule.forRootAsync({
 *   imports: [ConfigModule],
 *   inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ serviceName: 'orders', defaultMs: config.get('BUDGET_MS') }),
 * });
 * ```
 */
export interface DeadlineModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: never[]) => DeadlineModuleOptions | Promise<DeadlineModuleOptions>;
  inject?: InjectionToken[] | undefined;
}

/** The platform's mount, made as soon as the module's setup is known (see mount.ts). */
const MOUNT = Symbol('deadline.nestjs.mount');

/**
 * The module. Import it once, in the root module: every HTTP request then runs inside its own deadline context —
 * its middleware, guards, interceptors, pipes, handler, providers (request-scoped ones too) and exception filters —
 * from the moment it arrives, before Nest's body parsers; answered 504 when it runs out (499 when its client left),
 * through Nest's exception layer, never logged at error level; one line per request through Nest's `Logger`.
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [DeadlineModule.forRoot({ serviceName: 'orders', defaultMs: 2_000, maxMs: 10_000 })],
 *   controllers: [OrdersController],
 * })
 * export class AppModule {}
 * ```
 */
@Module({})
// biome-ignore lint/complexity/noStaticOnlyClass: a Nest module is a class, configured by its static forRoot()
export class DeadlineModule {
  /** The module with these options (checked now: a bad value throws an `InvalidArgumentError` naming it). */
  static forRoot(options: DeadlineModuleOptions = {}): DynamicModule {
    return moduleWith([{ provide: DEADLINE_SETUP, useValue: setUp(options) }], undefined);
  }

  /** The module with options from a factory (checked when it resolves). */
  static forRootAsync(options: DeadlineModuleAsyncOptions): DynamicModule {
    return moduleWith(
      [
        { provide: DEADLINE_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
        { provide: DEADLINE_SETUP, useFactory: setUp, inject: [DEADLINE_OPTIONS] },
      ],
      options.imports,
    );
  }
}

/** The module with `setup`, the providers that give its setup, and what they import. */
function moduleWith(setup: NonNullable<DynamicModule['providers']>, imports: ModuleMetadata['imports']): DynamicModule {
  return {
    module: DeadlineModule,
    global: true,
    imports: imports ?? [],
    providers: [
      ...setup,
      {
        provide: MOUNT,
        useFactory: (host: HttpAdapterHost, moduleSetup: ModuleSetup) => mountOnPlatform(host, moduleSetup),
        inject: [HttpAdapterHost, DEADLINE_SETUP],
      },
      DeadlineExceptionFilter,
      { provide: APP_INTERCEPTOR, useClass: DeadlineInterceptor },
      { provide: APP_FILTER, useExisting: DeadlineExceptionFilter },
    ],
    exports: [DEADLINE_SETUP, DeadlineExceptionFilter],
  };
}
