// An accessibility scan (axe-core, WCAG 2.1 A and AA rules) of every page a person importing
// files goes through: upload, review, the job (waiting and done), the job list, datasets and a
// dataset (and deleting it), and signing in or up. A rule broken anywhere fails the test, naming the rule and the elements.
import AxeBuilder from '@axe-core/playwright';
import type { Page } from '@playwright/test';
import { Worker, expect, test } from './app';
import { UploadPage, expectHydrated, fixture } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

async function expectAccessible(page: Page, what: string): Promise<void> {
  await expectHydrated(page);
  const results = await new AxeBuilder({ page })
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'])
    .analyze();
  const broken = results.violations.map(
    (v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`,
  );
  expect(broken, `${what} breaks accessibility rules`).toEqual([]);
}

test('the pages of an import pass an accessibility scan', async ({ page, app }) => {
  test.setTimeout(120_000);
  const upload = new UploadPage(page);
  await upload.goto();
  await expectAccessible(page, 'the upload page');

  const review = await upload.upload(fixture('contacts.xlsx'));
  await expectAccessible(page, 'the review page');
  const dataset = `a11y_${Date.now().toString(36)}`;
  await review.chooseDataset(dataset);
  await expectAccessible(page, 'the review page with a new dataset');

  await review.start('import');
  await expectAccessible(page, 'a waiting job');
  await expect(page).toHaveTitle(/Import of contacts\.xlsx — waiting/);
  worker = await Worker.start(app);
  await expect(page.getByTestId('job-message')).toHaveText(/^(Completed with|Job complete)/, {
    timeout: 60_000,
  });
  await expect(page).toHaveTitle(/Import of contacts\.xlsx — completed/);
  // Its row in error (an email the suggested type refuses) is listed on the page too.
  await expect(page.getByTestId('error-row')).toHaveCount(1);
  await expectAccessible(page, 'a finished job with its rows in error');

  for (const path of ['/jobs', '/datasets', `/datasets/${dataset}`, '/login', '/signup']) {
    await page.goto(path);
    await expectAccessible(page, path);
  }

  await page.goto(`/datasets/${dataset}`);
  await expectHydrated(page);
  await page.getByTestId('delete-dataset').click();
  await expectAccessible(page, 'a dataset asking whether to delete it');
  await page.getByTestId('confirm-delete').click();
  await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
  await expect(page.getByTestId('job-message')).toHaveText('Job complete', { timeout: 60_000 });
  await expectAccessible(page, 'a finished deletion');
});
