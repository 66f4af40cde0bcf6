import { writeFile } from 'node:fs/promises';
import { Worker, expect, test } from './app';
import { JobPage, MESSAGES, UploadPage, expectHydrated } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('a waiting job is cancelled from its page, then retried and completed', async ({ page, app }, testInfo) => {
  const file = testInfo.outputPath('later.csv');
  await writeFile(file, 'id,name\n1,Ada\n2,Grace\n');
  const dataset = `e2e_control_${Date.now().toString(36)}`;

  const upload = new UploadPage(page);
  await upload.goto();
  const jobId = await upload.importFile(file, dataset);
  const job = new JobPage(page);
  await expectHydrated(page);
  // No worker yet: the job waits until it is cancelled.
  await expect(job.message).toHaveText(MESSAGES.waiting);
  await page.getByTestId('cancel-job').click();
  await expect(job.message).toHaveText('Job cancelled');
  await expect(page.getByTestId('cancel-job')).toHaveCount(0);

  // Retry runs again what the job had not done: here, all of it.
  await page.getByTestId('retry-job').click();
  await expect(job.message).toHaveText(MESSAGES.waiting);
  worker = await Worker.start(app);
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(job.rows).toHaveText('2 of 2 rows');
  await expect(page.getByTestId('retry-job')).toHaveCount(0);

  await page.goto('/jobs');
  await expectHydrated(page);
  const row = page.getByTestId('job-row').filter({ has: page.locator(`a[href="/jobs/${jobId}"]`) });
  await expect(row.getByTestId('job-status')).toHaveText('completed');
});
