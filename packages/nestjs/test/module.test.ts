/**
 * The module itself: its options checked when it is made, `forRootAsync()` from a factory with what it injects,
 * `@Deadline()`'s limits checked when the class is defined, and an application made from a testing module.
 */
import 'reflect-metadata';
import { InvalidArgumentError } from '@deadline/core';
import { Controller, Get, Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { LogLine } from '../../server/test/harness.ts';
import { Deadline, DeadlineModule, type DeadlineModuleOptions } from '../src/index.ts';
import { MemoryLogger, startNest } from './harness.ts';

@Controller()
class BudgetController {
  @Get()
  budget() {
    return { ok: true };
  }
}

@Injectable()
class Config {
  readonly budgetMs = 700;
}

@Module({ providers: [Config], exports: [Config] })
class ConfigModule {}

describe('DeadlineModule', () => {
  it('checks its options when it is made, naming the option', () => {
    expect(() => DeadlineModule.forRoot({ defaultMs: 0 })).toThrow(InvalidArgumentError);
    expect(() => DeadlineModule.forRoot({ serviceName: 'a b' })).toThrow(/serviceName must be/);
    expect(() => DeadlineModule.forRoot({ logger: 'console' as never })).toThrow(/logger must be/);
  });

  it('checks @Deadline() limits when the class is defined', () => {
    expect(() => Deadline({ defaultMs: 5_000, maxMs: 1_000 })).toThrow(/@Deadline\(\) defaultMs must be at most maxMs/);
  });

  it('forRootAsync: the options from a factory with what it injects', async () => {
    const logs: LogLine[] = [];
    @Module({
      imports: [
        DeadlineModule.forRootAsync({
          imports: [ConfigModule],
          inject: [Config],
          useFactory: (config: Config): DeadlineModuleOptions => ({
            serviceName: 'orders',
            defaultMs: config.budgetMs,
          }),
        }),
      ],
      controllers: [BudgetController],
    })
    class AppModule {}
    const app = await startNest(AppModule, 'express', logs);
    try {
      await (await request(app.url)).body.dump();
      await expect
        .poll(() => logs.find((line) => line.msg === 'deadline: ok'))
        .toMatchObject({ budgetMs: 700, hop: 'orders' });
    } finally {
      await app.close();
    }
  });

  for (const platform of ['express', 'fastify'] as const) {
    it(`an application made from a testing module (${platform}) gets the deadline too`, async () => {
      const logs: LogLine[] = [];
      const moduleRef = await Test.createTestingModule({
        imports: [DeadlineModule.forRoot({ serviceName: 'orders', defaultMs: 800 })],
        controllers: [BudgetController],
      }).compile();
      const { ExpressAdapter } = await import('@nestjs/platform-express');
      const { FastifyAdapter } = await import('@nestjs/platform-fastify');
      const app = moduleRef.createNestApplication(
        platform === 'express' ? new ExpressAdapter() : new FastifyAdapter(),
        {
          logger: new MemoryLogger(logs),
        },
      );
      app.useLogger(new MemoryLogger(logs));
      await app.listen(0, '127.0.0.1');
      try {
        const address = app.getHttpServer().address() as { port: number };
        const res = await request(`http://127.0.0.1:${address.port}/`, { headers: { 'x-request-deadline': '300' } });
        await res.body.dump();
        await expect.poll(() => logs.find((line) => line.msg === 'deadline: ok')).toMatchObject({ budgetMs: 300 });
      } finally {
        await app.close();
      }
    });
  }
});
