import { writeFile } from 'node:fs/promises';
import { Worker, expect, test } from './app';
import { JobPage, MESSAGES, UploadPage, expectHydrated } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('a dataset is exported from its page and the file downloaded', async ({ page, app }, testInfo) => {
  const file = testInfo.outputPath('team.csv');
  await writeFile(file, 'name,role\nAda,engineer\nGrace,=admiral\n');
  const dataset = `e2e_export_${Date.now().toString(36)}`;

  const upload = new UploadPage(page);
  await upload.goto();
  await upload.importFile(file, dataset);
  worker = await Worker.start(app);
  const job = new JobPage(page);
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });

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
