// The app under test: for each spec file, the real server (`$CONVEYOR_SERVER_BIN serve`,
// serving the site `cargo leptos build` made in target/site) on a free port with a database of its own in the test cluster
// (`$CONVEYOR_TEST_DATABASE_URL`), stopped and dropped once the file's tests are done. Specs
// import `test` and `expect` from here: `baseURL` is the file's server, `app` gives its
// database and starts workers for it. No server on :3000 is ever used.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { test as base } from '@playwright/test';

export { expect } from '@playwright/test';

const ROOT = path.join(__dirname, '..', '..');

/** The `server` binary (debug unless told otherwise): `make test` uses the one `cargo test` built. */
const SERVER_BIN = process.env.CONVEYOR_SERVER_BIN ?? path.join(ROOT, 'target', 'debug', 'server');

/** The password of every account `App.addUser` makes. */
export const PASSWORD = 'correct horse battery';

/** How long a server may take to listen (it migrates its new database first). */
const START_MS = 60_000;

/** Settings of every server and worker: no workers in the server (tests start them), small
 * chunks (a 30,000-row import shows progress), one task at a time per worker. */
const SETTINGS: Record<string, string> = {
  CONVEYOR_NO_WORKERS: '1',
  CONVEYOR_CHUNK_ROWS: '200',
  CONVEYOR_WORKER_CONCURRENCY: '1',
};

/** One spec file's server and database. */
export class App {
  private constructor(
    /** Where the server answers, e.g. `http://127.0.0.1:41234`. */
    readonly url: string,
    /** The file's own database. */
    readonly databaseUrl: string,
    private readonly adminUrl: string,
    private readonly database: string,
    private readonly server: ChildProcess,
  ) {}

  /** The environment of a process that works on this app's database. */
  env(): NodeJS.ProcessEnv {
    return { ...process.env, ...SETTINGS, DATABASE_URL: this.databaseUrl };
  }

  /** Runs the `server` binary (e.g. `user add`) against this app's database; its stdout. */
  run(args: string[], input?: string): string {
    return execFileSync(SERVER_BIN, args, {
      input,
      env: this.env(),
      stdio: ['pipe', 'pipe', 'inherit'],
    }).toString();
  }

  /** Runs SQL on this app's database. */
  sql(statement: string): void {
    psql(this.databaseUrl, statement);
  }

  /** `server user add` (the operator's command), with `PASSWORD` on stdin. */
  addUser(email: string, role: 'admin' | 'viewer' | 'member'): void {
    this.run(['user', 'add', '--email', email, '--role', role, '--password-stdin'], `${PASSWORD}\n`);
  }

  /** From now on every write of a row holding `marker` fails, as a broken disk would make it. */
  poisonRows(marker: string): void {
    this.sql(`create or replace function e2e_poison() returns trigger language plpgsql as $$
         begin
           if new.record like '%${marker}%' then raise exception 'the disk is on fire'; end if;
           return new;
         end $$;
         drop trigger if exists e2e_poison on dataset_rows;
         create trigger e2e_poison before insert on dataset_rows
           for each row execute function e2e_poison()`);
  }

  /** Rows are written again (undoes `poisonRows`). */
  healRows(): void {
    this.sql('drop trigger if exists e2e_poison on dataset_rows');
  }

  static async start(specFile: string): Promise<App> {
    const adminUrl = process.env.CONVEYOR_TEST_DATABASE_URL;
    if (!adminUrl)
      throw new Error(
        'CONVEYOR_TEST_DATABASE_URL is not set: run `make e2e` (or `make test`), or start the test ' +
          'cluster (`PG_FAST=1 .ci/pg.sh start target/test-pg`) and set it to ' +
          '`.ci/pg.sh url target/test-pg postgres`',
      );
    if (!existsSync(SERVER_BIN))
      throw new Error(`${SERVER_BIN} does not exist: run \`make e2e\` (or \`cargo leptos build\`) first`);
    const stem = path.basename(specFile).replace(/\.spec\.ts$/, '').replace(/[^a-z0-9]+/gi, '_');
    const database = `e2e_${stem.toLowerCase()}_${Math.random().toString(36).slice(2, 10)}`;
    psql(adminUrl, `create database ${database} template template0`);
    const databaseUrl = withDatabase(adminUrl, database);
    const server = spawn(SERVER_BIN, ['serve'], {
      cwd: ROOT,
      env: {
        ...process.env,
        ...SETTINGS,
        DATABASE_URL: databaseUrl,
        // What `cargo leptos` gives the server it runs; port 0: the system picks a free one,
        // which the server logs.
        LEPTOS_OUTPUT_NAME: 'conveyor',
        LEPTOS_SITE_ROOT: path.join(ROOT, 'target', 'site'),
        LEPTOS_SITE_PKG_DIR: 'pkg',
        LEPTOS_SITE_ADDR: '127.0.0.1:0',
        NO_COLOR: '1',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const url = await listening(server);
      return new App(url, databaseUrl, adminUrl, database, server);
    } catch (err) {
      server.kill('SIGKILL');
      psql(adminUrl, `drop database if exists ${database} with (force)`);
      throw err;
    }
  }

  /** SIGTERM (SIGKILL after 15 s), then drops the database. */
  async stop(): Promise<void> {
    await stopProcess(this.server, 15_000);
    psql(this.adminUrl, `drop database if exists ${this.database} with (force)`);
  }
}

/** Waits for the server's "listening on http://…" line; its URL. Its log goes on to stdout. */
async function listening(server: ChildProcess): Promise<string> {
  const lines = createInterface({ input: server.stdout! });
  const seen: string[] = [];
  const found = new Promise<string>((resolve, reject) => {
    lines.on('line', (line) => {
      process.stdout.write(`${line}\n`);
      const match = /listening on (http:\/\/[^\s\x1b]+)/.exec(line);
      if (match) resolve(match[1]);
      else if (seen.length < 200) seen.push(line);
    });
    server.once('exit', (code, signal) =>
      reject(new Error(`the server exited (${signal ?? code}) before it listened:\n${seen.join('\n')}`)),
    );
    server.once('error', reject);
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the server did not listen within ${START_MS} ms:\n${seen.join('\n')}`)),
      START_MS,
    );
  });
  try {
    return await Promise.race([found, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** SIGTERM, then SIGKILL if the process has not exited within `graceMs`. */
async function stopProcess(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

function psql(url: string, statement: string): void {
  execFileSync('psql', [url, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-c', statement], {
    env: { ...process.env, PGOPTIONS: '-c client_min_messages=warning' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** `url` with its database name replaced. */
function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/**
 * `$CONVEYOR_SERVER_BIN worker` on the app's database (the app is served with
 * CONVEYOR_NO_WORKERS=1, so no job runs before this).
 */
export class Worker {
  private constructor(private readonly child: ChildProcess) {}

  static async start(app: App): Promise<Worker> {
    const child = spawn(SERVER_BIN, ['worker'], { env: app.env(), stdio: 'inherit' });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (err) => reject(new Error(`cannot start ${SERVER_BIN} worker: ${err.message}`)));
    });
    child.once('exit', (code, signal) => {
      if (code !== null && code !== 0) console.error(`worker exited with code ${code}`);
      else if (signal && signal !== 'SIGTERM' && signal !== 'SIGKILL')
        console.error(`worker killed by ${signal}`);
    });
    return new Worker(child);
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    await stopProcess(this.child, graceMs);
  }
}

/** The apps of one Playwright worker process: one at a time, for the spec file it runs. */
class Apps {
  private current?: { file: string; app: App };

  async for(file: string): Promise<App> {
    if (this.current?.file !== file) {
      await this.stop();
      this.current = { file, app: await App.start(file) };
    }
    return this.current.app;
  }

  async stop(): Promise<void> {
    const current = this.current;
    this.current = undefined;
    await current?.app.stop();
  }
}

export const test = base.extend<{ app: App }, { apps: Apps }>({
  apps: [
    async ({}, use) => {
      const apps = new Apps();
      await use(apps);
      await apps.stop();
    },
    { scope: 'worker' },
  ],
  // Files run one after another in a worker: the first test of a file stops the previous
  // file's app and starts its own.
  app: async ({ apps }, use, testInfo) => {
    await use(await apps.for(testInfo.file));
  },
  baseURL: async ({ app }, use) => {
    await use(app.url);
  },
});
