import path from 'node:path';
import { defineConfig } from '@playwright/test';

// Run after `cargo leptos build` has made the site in target/site (the Makefile's e2e). There is no webServer: each spec file gets
// a server of its own on a free port, with a database of its own (tests/app.ts), so a server
// left on :3000 (`make run`) is never what is tested. Paths are relative to this file.
export default defineConfig({
  testDir: path.join(__dirname, 'tests'),
  outputDir: path.join(__dirname, 'test-results'),
  forbidOnly: !!process.env.CI,
  fullyParallel: false,
  workers: 1,
  retries: 0,
  timeout: 60_000,
  reporter: 'list',
  use: {
    browserName: 'chromium',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    // Debian's Chromium: Playwright's own browser builds cannot be downloaded here.
    launchOptions: {
      executablePath: '/usr/bin/chromium',
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    },
  },
});
