// The review between upload and import, walked through as a person does it: a workbook with a
// cover sheet and headers spelled unlike the dataset; nothing picked (the default sheet and
// header row are right), one mapping adjusted, a dry run, the import, the error report
// downloaded, fixed and imported again, the dataset complete.
import { readFile, writeFile } from 'node:fs/promises';
import { Worker, expect, test } from './app';
import { JOB_PATH, JobPage, ReviewPage, UploadPage, expectHydrated, fixture } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('preview, map, dry run, import, fix the errors and import them', async ({ page, app }, testInfo) => {
  test.setTimeout(180_000);
  // Pages that go away must not leave anything reading what went with them.
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const dataset = `contacts_${Date.now().toString(36)}`;
  await page.goto('/');
  await expectHydrated(page);
  // The dataset the contacts go to (made through the API: it makes this browser a guest).
  const made = await page.request.post('/api/datasets', {
    data: {
      name: dataset,
      columns: [
        { name: 'name', required: true },
        { name: 'email', type: 'email' },
        { name: 'signed_up', type: 'date' },
      ],
    },
  });
  expect(made.status(), await made.text()).toBe(201);
  worker = await Worker.start(app);

  const upload = new UploadPage(page);
  await upload.goto();
  const review = await upload.upload(fixture('contacts.xlsx'));
  await expect(page).toHaveTitle(/Review the import of contacts\.xlsx/);
  // The new page's heading has the focus, not the button that led here.
  await expect(page.locator('main h1')).toBeFocused();
  // Nothing picked: the data sheet, not the cover; the header below the title rows.
  await expect(review.sheetSelect).toHaveValue('Contacts');
  await expect(review.sheetSelect.locator('option')).toHaveText(['Read me (1 rows)', 'Contacts (44 rows)']);
  await expect(review.headerRowInput).toHaveValue('4');
  await expect(review.sample.locator('thead th')).toHaveText(['Row', 'Full name', 'E-mail', 'Signed up', 'Notes']);
  await expect(review.sample.locator('tbody tr').first()).toContainText('Person 1');

  await review.chooseDataset(dataset);
  const map = (column: string) => page.getByTestId(`map-${column}`);
  await expect(map('E-mail')).toHaveValue('email');
  await expect(map('Signed up')).toHaveValue('signed_up');
  await expect(map('Notes')).toHaveValue('');
  // "Full name" is not "name": the required column is named before anything runs.
  await expect(map('Full name')).toHaveValue('');
  await expect(review.missingRequired).toContainText('name');
  await expect(review.importButton).toBeDisabled();
  await map('Full name').selectOption('name');
  await expect(review.missingRequired).toHaveCount(0);
  await page.screenshot({ path: testInfo.outputPath('review.png'), fullPage: true });

  // The dry run: every row checked, nothing written.
  const dryRun = await review.start('dry run');
  const job = new JobPage(page);
  await expect(job.message).toHaveText(
    'Dry run complete: 35 rows ok, 5 with errors; nothing was written',
    { timeout: 60_000 },
  );
  await expect(page.getByTestId('job-mapping')).toContainText('Full name');
  const empty = await page.request.get(`/api/datasets/${dataset}/rows`);
  expect((await empty.json()).rows).toEqual([]);

  // Import what it checked.
  await page.getByTestId('import-dry-run').click();
  await page.waitForURL((url) => JOB_PATH.test(url.pathname) && !url.pathname.endsWith(dryRun));
  await expect(job.message).toHaveText('Completed with 5 errors', { timeout: 60_000 });
  await expect(page.getByTestId('job-written')).toHaveText('35 added.');
  const imported = new URL(page.url()).pathname.match(JOB_PATH)![1];

  // The rows in error on the page: counted by column, filtered by column or message.
  const table = page.getByTestId('error-table');
  await expect(page.getByTestId('errors-in-signed_up')).toHaveText('signed_up (4)');
  await expect(page.getByTestId('errors-in-email')).toHaveText('email (1)');
  await expect(table.getByTestId('error-row')).toHaveCount(5);
  await page.getByTestId('errors-in-signed_up').click();
  await expect(table.getByTestId('error-row')).toHaveCount(4);
  await expect(table.getByTestId('error-row').first()).toContainText('someday');
  await table.getByRole('button', { name: /^All/ }).click();
  await page.getByTestId('errors-filter').fill('email');
  await page.getByTestId('errors-filter').press('Enter');
  await expect(table.getByTestId('error-row')).toHaveCount(1);
  await expect(table.getByTestId('error-row')).toContainText('not an email');

  // The error report: each bad row as it was, after its row number and errors.
  const link = page.getByTestId('error-report');
  const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
  expect(download.suggestedFilename()).toBe('contacts-errors.csv');
  const report = await readFile(await download.path(), 'utf8');
  const lines = report.replace(/^\ufeff/, '').trimEnd().split('\n');
  expect(lines[0]).toBe('_row,_error,Full name,E-mail,Signed up,Notes');
  expect(lines).toHaveLength(6);
  expect(lines[1]).toMatch(/^14,.*someday/);

  // Fixed in a spreadsheet, imported again from the job's page into the same dataset.
  const fixed = testInfo.outputPath('contacts-errors.csv');
  await writeFile(fixed, report.replaceAll('someday', '2024-04-30').replaceAll('not an email', 'fixed@example.com'));
  await page.getByTestId('fix-and-reimport').click();
  await expectHydrated(page);
  const again = await upload.upload(fixed);
  await expect(page.getByTestId('fixes-notice')).toBeVisible();
  await expect(again.datasetSelect).toHaveValue(dataset);
  // The mapping used before is suggested again; the report's own columns are not mapped.
  await expect(map('Full name')).toHaveValue('name');
  await expect(map('_row')).toHaveValue('');
  await expect(map('_error')).toHaveValue('');
  await again.start('import');
  await expect(job.message).toHaveText('Job complete', { timeout: 60_000 });
  await expect(page.getByTestId('job-fixes').locator('a')).toHaveAttribute('href', `/jobs/${imported}`);

  // Every contact is in the dataset, once.
  const rows = await page.request.get(`/api/datasets/${dataset}/rows?limit=100`);
  const names: string[] = (await rows.json()).rows.map((row: { name: string }) => row.name);
  expect(names).toHaveLength(40);
  expect(new Set(names).size).toBe(40);
  expect(errors).toEqual([]);
});

test('a review loaded in full hydrates and offers a new dataset', async ({ page }) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  await page.goto('/');
  const uploaded = await page.request.post('/api/uploads', {
    multipart: { file: { name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from('name,n\nAna,1\n') } },
  });
  expect(uploaded.ok(), await uploaded.text()).toBe(true);
  // A dataset of theirs, so the server renders the picker's options.
  const made = await page.request.post('/api/datasets', {
    data: { name: `mine_${Date.now().toString(36)}`, columns: [{ name: 'name' }] },
  });
  expect(made.status()).toBe(201);
  await page.goto(`/uploads/${(await uploaded.json()).id}`);
  await expectHydrated(page);
  const review = new ReviewPage(page);
  await expect(review.sample).toBeVisible();
  await review.datasetSelect.selectOption({ label: 'New dataset...' });
  await expect(review.newDatasetInput).toBeVisible();
  await review.newDatasetInput.fill('typed_slowly');
  // Typing the name keeps what was chosen for the columns.
  await page.getByTestId('type-n').selectOption('text');
  await review.newDatasetInput.fill('typed_slowly_2');
  await expect(page.getByTestId('type-n')).toHaveValue('text');
  expect(errors).toEqual([]);
});
