import { writeFile } from 'node:fs/promises';
import { Worker, expect, test } from './app';
import { JobPage, UploadPage } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('bad rows are reported on the job page with a downloadable report', async ({ page, app }, testInfo) => {
  const file = testInfo.outputPath('mixed.csv');
  await writeFile(file, 'id,name\n1,Ada\n2\n3,Grace\n=cmd(),x,extra\n');
  const dataset = `e2e_errors_${Date.now().toString(36)}`;

  const upload = new UploadPage(page);
  await upload.goto();
  const jobId = await upload.importFile(file, dataset);
  worker = await Worker.start(app);

  const job = new JobPage(page);
  // Completed, but not cleanly: the outcome says so.
  await expect(job.message).toHaveText('Completed with 2 errors', { timeout: 60_000 });
  await expect(page.getByText('2 rows had errors and were not imported.')).toBeVisible();

  const link = page.getByTestId('error-report');
  await expect(link).toHaveAttribute('href', `/api/jobs/${jobId}/errors.csv`);
  const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
  expect(download.suggestedFilename()).toBe('mixed-errors.csv');
  const report = await (await page.request.get(`/api/jobs/${jobId}/errors.csv`)).text();
  // A byte order mark first, so Excel reads it as UTF-8.
  // The sheet row and the errors first, then the row exactly as it was: the formula-like cell
  // neutralised, the extra field kept.
  expect(report).toBe(
    '\ufeff_row,_error,id,name\n' +
      '3,"expected 2 fields, found 1",2\n' +
      "5,\"expected 2 fields, found 3\",'=cmd(),x,extra\n",
  );
});
