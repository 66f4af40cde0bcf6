import { readFile } from 'node:fs/promises';
import type { Response } from '@playwright/test';
import { Worker, expect, test } from './app';
import {
  JobListPage,
  JobPage,
  MESSAGES,
  UploadPage,
  expectHydrated,
  fixture,
  recordJobMessages,
  seenJobMessages,
  writeCsv,
} from './pages';

const ROWS = 30_000;

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('imports a CSV and shows the three messages in order', async ({ page, app }, testInfo) => {
  test.setTimeout(180_000);
  const file = testInfo.outputPath('people.csv');
  const firstRow = await writeCsv(file, ROWS);
  const dataset = `e2e_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;

  await recordJobMessages(page);
  const upload = new UploadPage(page);
  await upload.goto();
  // The job page follows the job over SSE: wait until that stream is open, so that no update
  // can happen before the page listens.
  const eventStream = page.waitForResponse(isEventStream, { timeout: 30_000 });
  const jobId = await upload.importFile(file, dataset);

  const job = new JobPage(page);
  await expectHydrated(page);
  await eventStream;
  await expect(job.message).toHaveText(MESSAGES.waiting);

  worker = await Worker.start(app);
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });

  // Exactly waiting -> running (any number of percentages, never decreasing) -> complete.
  const seen = await seenJobMessages(page);
  const kinds = seen.map(kindOf).filter((kind, i, all) => i === 0 || kind !== all[i - 1]);
  expect(kinds, `messages seen: ${JSON.stringify(seen)}`).toEqual([
    'waiting',
    'running',
    'complete',
  ]);
  const percents = seen.flatMap((text) => {
    const m = MESSAGES.running.exec(text);
    return m ? [Number(m[1])] : [];
  });
  for (const [i, p] of percents.entries()) {
    expect(p, `percentages seen: ${percents}`).toBeLessThanOrEqual(100);
    if (i > 0) expect(p, `percentages seen: ${percents}`).toBeGreaterThanOrEqual(percents[i - 1]);
  }

  await expect(job.rows).toHaveText(
    new RegExp(`^${numberPattern(ROWS)} of ${numberPattern(ROWS)} rows$`),
  );
  await expect.poll(() => job.progressPosition()).toBe(1);

  const jobRes = await page.request.get(`/api/jobs/${jobId}`);
  expect(jobRes.ok(), await jobRes.text()).toBe(true);
  expect(await jobRes.json()).toMatchObject({
    status: 'completed',
    itemCount: ROWS,
    itemProgress: ROWS,
  });

  const rowsRes = await page.request.get(
    `/api/datasets/${encodeURIComponent(dataset)}/rows?limit=5`,
  );
  expect(rowsRes.ok(), await rowsRes.text()).toBe(true);
  const { rows } = await rowsRes.json();
  expect(rows).toHaveLength(5);
  expect(rows[0]).toEqual(firstRow);

  const list = new JobListPage(page);
  await list.goto();
  const row = list.rowFor(jobId);
  await expect(row).toHaveCount(1);
  await expect(row.getByTestId('job-status')).toHaveText('completed');
  await expect(row).toContainText('people.csv');
  // Newest first: no job was created after this one.
  await expect(list.rows.first().locator(`a[href$="/jobs/${jobId}"]`)).toHaveCount(1);
});

test('imports a workbook sheet chosen by name', async ({ page, app }) => {
  const dataset = `e2e_xls_${Date.now().toString(36)}`;
  const upload = new UploadPage(page);
  await upload.goto();
  const jobId = await upload.importFile(fixture('people.xls'), dataset, 'People');

  worker = await Worker.start(app);
  const job = new JobPage(page);
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(job.rows).toHaveText('2 of 2 rows');
  const rowsRes = await page.request.get(`/api/datasets/${dataset}/rows`);
  const { rows } = await rowsRes.json();
  expect(rows[0]).toEqual({ name: 'Ana', age: '31', joined: '2024-01-15' });
  expect(jobId).toBeTruthy();
});

test('a sheet that does not exist offers the workbook\'s sheets instead of Retry', async ({
  page,
  app,
}) => {
  const dataset = `e2e_fix_${Date.now().toString(36)}`;
  // Through the API: the review offers only the sheets there are.
  await page.goto('/');
  const uploaded = await page.request.post('/api/uploads', {
    multipart: {
      file: {
        name: 'people.xls',
        mimeType: 'application/vnd.ms-excel',
        buffer: await readFile(fixture('people.xls')),
      },
    },
  });
  expect(uploaded.ok(), await uploaded.text()).toBe(true);
  const created = await page.request.post('/api/jobs', {
    data: { jobType: 'import', fileGuid: (await uploaded.json()).id, dataset, sheet: 'Staff' },
  });
  expect(created.status(), await created.text()).toBe(202);
  await page.goto(`/jobs/${(await created.json()).id}`);
  await expectHydrated(page);

  worker = await Worker.start(app);
  const job = new JobPage(page);
  await expect(job.message).toContainText('no sheet named "Staff"', { timeout: 60_000 });
  // Retrying would fail the same way: the fix is offered in its place.
  await expect(page.getByTestId('retry-job')).toHaveCount(0);
  await expect(page.getByTestId('fix-job')).toHaveText('Choose another sheet');
  const fix = page.getByTestId('job-fix');
  await expect(fix.getByTestId('fix-sheet').locator('option')).toHaveText(['Empty', 'People']);
  await fix.getByTestId('fix-sheet').selectOption('People');
  await fix.getByTestId('fix-submit').click();
  // A new job, of the same upload and dataset, with that sheet.
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(job.rows).toHaveText('2 of 2 rows');
  const rowsRes = await page.request.get(`/api/datasets/${dataset}/rows`);
  expect((await rowsRes.json()).rows[0]).toEqual({ name: 'Ana', age: '31', joined: '2024-01-15' });
});

test('drag and drop selects the file', async ({ page }) => {
  const upload = new UploadPage(page);
  await upload.goto();
  await expect(upload.uploadButton).toBeDisabled();

  await upload.dropFile('dropped.csv', 'id,name,email,amount\n1,Ada,ada@example.com,1.00\n');

  await expect(upload.uploadButton).toBeEnabled();
  await expect(upload.dropZone).toContainText('dropped.csv');
});

test('an upload shows how much is sent, locks the form, and can be cancelled', async ({ page }) => {
  // The server never answers this upload: it is still on its way when Cancel is pressed.
  let held = 0;
  await page.route('**/api/uploads', () => {
    held += 1;
  });
  const upload = new UploadPage(page);
  await upload.goto();
  await upload.fileInput.setInputFiles({
    name: 'slow.csv',
    mimeType: 'text/csv',
    buffer: Buffer.from('id,name\n1,Ada\n'),
  });
  await upload.uploadButton.click();
  await expect(page.getByTestId('upload-progress')).toBeVisible();
  await expect(page.getByTestId('upload-percent')).toHaveText(/^\d{1,3}% sent$/);
  await expect(upload.fileInput).toBeDisabled();
  await expect(upload.uploadButton).toBeDisabled();
  expect(held).toBe(1);

  await page.getByTestId('cancel-upload').click();
  await expect(page.getByRole('alert')).toHaveText(/cancelled/);
  await expect(page.getByTestId('upload-progress')).toHaveCount(0);
  await expect(upload.fileInput).toBeEnabled();
  await expect(upload.uploadButton).toBeEnabled();
  await expect(page).toHaveURL(/\/$/);
});

function isEventStream(response: Response): boolean {
  return (response.headers()['content-type'] ?? '').startsWith('text/event-stream');
}

function kindOf(message: string): string {
  if (message === MESSAGES.waiting) return 'waiting';
  if (MESSAGES.running.test(message)) return 'running';
  if (message === MESSAGES.complete) return 'complete';
  return `unexpected: ${message}`;
}

/** `30000` -> a pattern accepting 30000, 30,000, 30.000 or 30 000 (any space kind). */
function numberPattern(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, '[,.\\s\\u00a0\\u202f]?');
}
