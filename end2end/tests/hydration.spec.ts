import type { Page } from '@playwright/test';
import { expect, test } from './app';
import { UploadPage, expectHydrated } from './pages';

/**
 * Collects console errors and uncaught exceptions from the page's whole life. The browser's own
 * favicon request is not the app's doing: its 404 is ignored.
 */
function collectErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (msg) => {
    const url = msg.location().url;
    if (msg.type() === 'error' && !url.endsWith('/favicon.ico'))
      errors.push(`console: ${msg.text()} (${url})`);
  });
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  return errors;
}

// Each page, with a piece of markup that only server-side rendering can have put there.
const PAGES = {
  '/': 'data-testid="upload-button"',
  '/jobs': '</html>',
  '/datasets': '</html>',
  '/login': 'data-testid="sign-in-button"',
  '/signup': 'data-testid="sign-up-button"',
  '/account': '</html>',
};

for (const [path, marker] of Object.entries(PAGES)) {
  test(`${path} is server-rendered and hydrates without errors`, async ({ page }) => {
    const errors = collectErrors(page);
    const res = await page.request.get(path);
    expect(res.status()).toBe(200);
    expect(await res.text()).toContain(marker);

    await page.goto(path);
    await expectHydrated(page);
    expect(errors).toEqual([]);
  });
}

test('the upload form is interactive once hydrated', async ({ page }) => {
  const errors = collectErrors(page);
  const upload = new UploadPage(page);
  await upload.goto();
  await expect(upload.uploadButton).toBeDisabled();

  await upload.fileInput.setInputFiles({
    name: 'tiny.csv',
    mimeType: 'text/csv',
    buffer: Buffer.from('id,name,email,amount\n1,Ada,ada@example.com,1.00\n'),
  });

  await expect(upload.uploadButton).toBeEnabled();
  expect(errors).toEqual([]);
});
