import { writeFile } from 'node:fs/promises';
import type { Page } from '@playwright/test';
import { type App, Worker, expect, test } from './app';
import { JobPage, MESSAGES, UploadPage, expectHydrated } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

/** Imports `csv` (a file of that name) into a new dataset through the pages, with a worker
 * running; the dataset's name. */
async function importedDataset(page: Page, app: App, file: string, csv: string): Promise<string> {
  await writeFile(file, csv);
  const dataset = `e2e_${Date.now().toString(36)}`;
  const upload = new UploadPage(page);
  await upload.goto();
  await upload.importFile(file, dataset);
  worker = await Worker.start(app);
  await expect(new JobPage(page).message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  return dataset;
}

test('a dataset is exported from its page and the file downloaded', async ({ page, app }, testInfo) => {
  const csv = 'name,role\nAda,engineer\nGrace,=admiral\n';
  const dataset = await importedDataset(page, app, testInfo.outputPath('team.csv'), csv);
  const job = new JobPage(page);

  for (const format of ['csv', 'xlsx']) {
    await page.goto(`/datasets/${dataset}`);
    await expectHydrated(page);
    await page.getByTestId(`export-${format}`).click();
    await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
    await expect(page.getByRole('heading', { level: 1 })).toHaveText(
      `Export of ${dataset} as ${format.toUpperCase()}`,
    );
    await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
    await expect(job.rows).toHaveText('2 of 2 rows');

    const link = page.getByTestId('download-result');
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    expect(download.suggestedFilename()).toBe(`${dataset}.${format}`);
    const response = await page.request.get((await link.getAttribute('href'))!);
    expect(response.ok()).toBe(true);
    if (format === 'csv') {
      // The formula-like cell is neutralised.
      expect(await response.text()).toBe("name,role\nAda,engineer\nGrace,'=admiral\n");
    } else {
      const bytes = await response.body();
      expect(bytes.subarray(0, 4).toString('latin1')).toBe('PK\u0003\u0004');
    }
  }
});

test('a dataset shows its size and is deleted from its page, the deletion followed live', async ({ page, app }, testInfo) => {
  const csv = 'name,role\nAda,engineer\nGrace,admiral\nKatherine,mathematician\n';
  const dataset = await importedDataset(page, app, testInfo.outputPath('crew.csv'), csv);
  const job = new JobPage(page);

  await page.goto('/datasets');
  const listed = page.getByTestId('dataset-row').filter({ hasText: dataset });
  await expect(listed.getByTestId('dataset-row-count')).toHaveText('3');

  await page.goto(`/datasets/${dataset}`);
  await expectHydrated(page);
  await expect(page.getByTestId('dataset-size')).toHaveText('3 rows, 2 columns');
  await expect(page.getByTestId('xlsx-too-big')).toHaveCount(0);
  await page.getByTestId('delete-dataset').click();
  await expect(page.getByTestId('delete-question')).toHaveText(
    `Delete ${dataset} and its 3 rows? This cannot be undone.`,
  );
  await page.getByTestId('keep-dataset').click();
  await expect(page.getByTestId('delete-question')).toHaveCount(0);
  await page.getByTestId('delete-dataset').click();
  await page.getByTestId('confirm-delete').click();

  await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Deletion of ${dataset}`);
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(job.rows).toHaveText('3 of 3 rows');
  await expect(page.getByTestId('job-written')).toHaveText('3 rows deleted.');
  await expect(page.getByTestId('cancel-job')).toHaveCount(0);

  await page.goto('/datasets');
  await expect(page.getByTestId('dataset-row').filter({ hasText: dataset })).toHaveCount(0);
  const gone = await page.request.get(`/api/datasets/${dataset}`);
  expect(gone.status()).toBe(404);
});
