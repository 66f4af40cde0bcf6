import path from 'node:path';
import { defineConfig } from '@playwright/test';

// `cargo leptos end-to-end` runs this from the repository root (end2end-cmd) and starts the
// server at the same moment, without waiting for it: the webServer entry below holds the
// tests back until http://127.0.0.1:3000/ answers. Paths are relative to this file.
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
    baseURL: 'http://127.0.0.1:3000',
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
  webServer: {
    // cargo-leptos owns the real server; this command only has to stay alive while Playwright
    // polls `url` (an already answering server is reused at once).
    command: 'node wait-for-server.mjs',
    cwd: __dirname,
    url: 'http://127.0.0.1:3000/',
    reuseExistingServer: true,
    timeout: 120_000,
  },
});
