// The `webServer.command` of playwright.config.ts. `cargo leptos end-to-end` starts the real
// server itself; Playwright polls `webServer.url` until it answers, but insists that the command
// it launched keeps running meanwhile. So this only stays alive until Playwright ends it.
const keepAlive = setInterval(() => {}, 1 << 30);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    clearInterval(keepAlive);
    process.exit(0);
  });
}
