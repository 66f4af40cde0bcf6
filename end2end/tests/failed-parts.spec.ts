import { Worker, expect, test } from './app';
import { JobPage, MESSAGES, expectHydrated } from './pages';

let worker: Worker | undefined;

const poison = `poison_${Date.now().toString(36)}`;

test.afterEach(async ({ app }) => {
  await worker?.stop();
  worker = undefined;
  app.healRows();
});

test('a part that fails every attempt is listed on the job page, and Retry runs it', async ({
  page,
  app,
}) => {
  // Every write of a row holding the marker fails, as a broken disk would make it.
  app.poisonRows(poison);

  const dataset = `e2e_parts_${Date.now().toString(36)}`;
  const uploaded = await page.request.post('/api/uploads', {
    multipart: {
      file: { name: 'parts.csv', mimeType: 'text/csv', buffer: Buffer.from(`id,name\n1,${poison}\n2,Grace\n`) },
    },
  });
  expect(uploaded.ok(), await uploaded.text()).toBe(true);
  // One attempt per part, so the part fails at once instead of after backed-off retries.
  const created = await page.request.post('/api/jobs', {
    data: {
      jobType: 'import',
      fileGuid: (await uploaded.json()).id,
      dataset,
      maxFailuresPerItem: 1,
    },
  });
  expect(created.status(), await created.text()).toBe(202);
  const jobId = (await created.json()).id;

  await page.goto(`/jobs/${jobId}`);
  await expectHydrated(page);
  const job = new JobPage(page);
  // No worker yet: the history says what the job waits for.
  await expect(page.getByTestId('job-waiting')).toContainText('Waits for a free worker');
  worker = await Worker.start(app);
  await expect(job.message).toHaveText(/^Job failed: 1 of 1 parts could not be processed/, {
    timeout: 60_000,
  });
  const parts = page.getByTestId('failed-part');
  await expect(parts).toHaveCount(1);
  await expect(parts.first()).toContainText('Part 1 (rows 1 to 2)');
  // The database's words stay in the server's log; the page names the reference to them.
  await expect(parts.first()).toContainText(
    /Something went wrong on our side \(reference [0-9a-f]{8}\)\./,
  );
  await expect(parts.first()).not.toContainText('fire');
  // The history follows the job: its changes of status, and the run that failed, by which
  // worker, with the same words.
  const history = page.getByTestId('job-history');
  await expect(page.getByTestId('job-waiting')).toHaveCount(0);
  await expect(page.getByTestId('job-timeline')).toContainText('running → failed');
  const failedRun = history.locator('[data-testid="history-run"][data-outcome="failed"]');
  await expect(failedRun).toHaveCount(1);
  await expect(failedRun).toContainText('part 1');
  await expect(failedRun).toContainText(/reference [0-9a-f]{8}/);
  await expect(page.getByTestId('history-parts')).toContainText('0 done, 0 to do, 1 failed.');

  // The disk is fixed: Retry runs the part again, and the job completes.
  app.sql('drop trigger e2e_poison on dataset_rows');
  await page.getByTestId('retry-job').click();
  await expect(job.message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(job.rows).toHaveText('2 of 2 rows');
  await expect(parts).toHaveCount(0);
  await expect(page.getByTestId('job-timeline')).toContainText('running → completed');
  await expect(
    history.locator('[data-testid="history-run"][data-outcome="done"]').filter({ hasText: 'part 1' }),
  ).toHaveCount(1);
});
