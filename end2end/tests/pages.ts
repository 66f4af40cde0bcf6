// Page objects and helpers shared by the specs. Selectors follow the app's test ids.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { type Browser, expect, type Locator, type Page } from '@playwright/test';
import { PASSWORD } from './app';

/** Matches a job page path and captures the job id. */
export const JOB_PATH = /\/jobs\/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

export const MESSAGES = {
  waiting: 'Waiting for job to start...',
  running: /^Job running, (\d{1,3})% complete\.\.\.$/,
  complete: 'Job complete',
} as const;

/** A workbook the server's tests also use (server/tests/fixtures). */
export function fixture(name: string): string {
  return path.join(__dirname, '..', '..', 'server', 'tests', 'fixtures', name);
}

/** Waits until the wasm bundle has hydrated the page (the app then sets body[data-hydrated]). */
export async function expectHydrated(page: Page): Promise<void> {
  await expect(page.locator('body')).toHaveAttribute('data-hydrated', 'true');
}

/** A browser of its own (its own cookies), signed in as `email` on `/login`. */
export async function signedIn(browser: Browser, email: string): Promise<Page> {
  const page = await (await browser.newContext()).newPage();
  await page.goto('/login');
  await expectHydrated(page);
  await page.getByTestId('email-input').fill(email);
  await page.getByTestId('password-input').fill(PASSWORD);
  await page.getByTestId('sign-in-button').click();
  await expect(page.getByTestId('signed-in-as')).toHaveText(email);
  return page;
}

/** Imports `body` as `page`'s person through the API, into the dataset named after the file,
 * with `options` added to the job request; the job's id. */
export async function importAs(
  page: Page,
  name: string,
  body: string,
  options: Record<string, unknown> = {},
): Promise<string> {
  const uploaded = await page.request.post('/api/uploads', {
    multipart: { file: { name, mimeType: 'text/csv', buffer: Buffer.from(body) } },
  });
  expect(uploaded.ok(), await uploaded.text()).toBe(true);
  const created = await page.request.post('/api/jobs', {
    data: {
      jobType: 'import',
      fileGuid: (await uploaded.json()).id,
      dataset: name.replace('.csv', ''),
      ...options,
    },
  });
  expect(created.status(), await created.text()).toBe(202);
  return (await created.json()).id;
}

/** `/`: choose or drop a file, upload it, then review and import it. */
export class UploadPage {
  readonly fileInput: Locator;
  readonly dropZone: Locator;
  readonly uploadButton: Locator;

  constructor(readonly page: Page) {
    this.fileInput = page.getByTestId('file-input');
    this.dropZone = page.getByTestId('drop-zone');
    this.uploadButton = page.getByTestId('upload-button');
  }

  async goto(): Promise<void> {
    await this.page.goto('/');
    await expectHydrated(this.page);
  }

  /** Drops a file onto the drop zone the way a browser does: dragenter, dragover, drop. */
  async dropFile(name: string, content: string, type = 'text/csv'): Promise<void> {
    const dataTransfer = await this.page.evaluateHandle(
      ({ name, content, type }) => {
        const dt = new DataTransfer();
        dt.items.add(new File([content], name, { type }));
        return dt;
      },
      { name, content, type },
    );
    for (const event of ['dragenter', 'dragover', 'drop']) {
      await this.dropZone.dispatchEvent(event, { dataTransfer });
    }
    await dataTransfer.dispose();
  }

  /** Sets the file and uploads it; the review page, once it shows the file. */
  async upload(file: string): Promise<ReviewPage> {
    await this.fileInput.setInputFiles(file);
    await expect(this.uploadButton).toBeEnabled();
    await this.uploadButton.click();
    await this.page.waitForURL(/\/uploads\/[0-9a-f-]{36}/);
    const review = new ReviewPage(this.page);
    await expect(review.sample).toBeVisible({ timeout: 30_000 });
    return review;
  }

  /** Uploads the file and imports it into `dataset` (a new one: every column text, as the
   * file has it; or the person's own of that name), as the review suggests; the job's id. */
  async importFile(file: string, dataset: string, sheet?: string): Promise<string> {
    const review = await this.upload(file);
    if (sheet) await review.chooseSheet(sheet);
    await review.chooseDataset(dataset, { types: 'text' });
    return review.start('import');
  }
}

/** `/uploads/{id}`: what the file holds, the dataset, where each column goes. */
export class ReviewPage {
  readonly sample: Locator;
  readonly sheetSelect: Locator;
  readonly headerRowInput: Locator;
  readonly datasetSelect: Locator;
  readonly newDatasetInput: Locator;
  readonly mappingRows: Locator;
  readonly missingRequired: Locator;
  readonly importButton: Locator;
  readonly dryRunButton: Locator;

  constructor(readonly page: Page) {
    this.sample = page.getByTestId('sample-table');
    this.sheetSelect = page.getByTestId('sheet-select');
    this.headerRowInput = page.getByTestId('header-row-input');
    this.datasetSelect = page.getByTestId('dataset-select');
    this.newDatasetInput = page.getByTestId('new-dataset-input');
    this.mappingRows = page.getByTestId('mapping-row');
    this.missingRequired = page.getByTestId('missing-required');
    this.importButton = page.getByTestId('import-button');
    this.dryRunButton = page.getByTestId('dry-run-button');
  }

  async chooseSheet(name: string): Promise<void> {
    await this.sheetSelect.selectOption(name);
    await expect(this.sheetSelect).toHaveValue(name);
  }

  /** Picks the person's dataset `name`, or names a new one (with `types: 'text'`, every
   * column text instead of the types suggested from the values). */
  async chooseDataset(name: string, { types = 'suggested' }: { types?: 'suggested' | 'text' } = {}): Promise<void> {
    const known = await this.page.request.get(`/api/datasets/${encodeURIComponent(name)}`);
    if (known.ok()) {
      await expect(this.datasetSelect.locator(`option[value="${name}"]`)).toHaveCount(1);
      await this.datasetSelect.selectOption(name);
      return;
    }
    await this.datasetSelect.selectOption({ label: 'New dataset...' });
    await this.newDatasetInput.fill(name);
    await expect(this.mappingRows.first()).toBeVisible();
    if (types === 'text') {
      for (const select of await this.page.locator('select[data-testid^="type-"]').all()) {
        await select.selectOption('text');
      }
    }
  }

  /** Starts the import or the dry run; the job's id, once its page shows. */
  async start(run: 'import' | 'dry run'): Promise<string> {
    const button = run === 'import' ? this.importButton : this.dryRunButton;
    await expect(button).toBeEnabled();
    await button.click();
    await this.page.waitForURL(JOB_PATH);
    return new URL(this.page.url()).pathname.match(JOB_PATH)![1];
  }
}

/** `/jobs/{id}`: live job status. */
export class JobPage {
  readonly message: Locator;
  readonly progress: Locator;
  readonly rows: Locator;

  constructor(readonly page: Page) {
    this.message = page.getByTestId('job-message');
    this.progress = page.locator('progress[data-testid="job-progress"]');
    this.rows = page.getByTestId('job-rows');
  }

  /** The progress bar's filled fraction (0..1, -1 when indeterminate). */
  async progressPosition(): Promise<number> {
    return this.progress.evaluate((el) => (el as HTMLProgressElement).position);
  }
}

/** `/jobs`: every job, newest first. */
export class JobListPage {
  readonly rows: Locator;

  constructor(readonly page: Page) {
    this.rows = page.locator('tr[data-testid="job-row"]');
  }

  async goto(): Promise<void> {
    await this.page.goto('/jobs');
    await expectHydrated(this.page);
  }

  rowFor(jobId: string): Locator {
    return this.rows.filter({ has: this.page.locator(`a[href$="/jobs/${jobId}"]`) });
  }
}

/**
 * Records every change of `[data-testid=job-message]`'s text into `window.__seen` (consecutive
 * repeats dropped, empty text ignored). Call before navigating: it is an init script, so it runs
 * in every document from its very start, and it observes the whole document, so it also catches
 * a job page that the router renders client-side.
 */
export async function recordJobMessages(page: Page): Promise<void> {
  await page.addInitScript(() => {
    const w = window as unknown as { __seen: string[] };
    w.__seen = [];
    const record = () => {
      const el = document.querySelector('[data-testid="job-message"]');
      const text = el?.textContent?.replace(/\s+/g, ' ').trim();
      if (text && w.__seen[w.__seen.length - 1] !== text) w.__seen.push(text);
    };
    new MutationObserver(record).observe(document, {
      subtree: true,
      childList: true,
      characterData: true,
    });
    record();
  });
}

export async function seenJobMessages(page: Page): Promise<string[]> {
  return page.evaluate(() => (window as unknown as { __seen: string[] }).__seen);
}

export type CsvRow = { id: string; name: string; email: string; amount: string };

/** Writes `id,name,email,amount` plus `count` rows to `path`; returns the first data row. */
export async function writeCsv(path: string, count: number): Promise<CsvRow> {
  const row = (i: number): CsvRow => ({
    id: String(i),
    name: `Person ${i}`,
    email: `person${i}@example.com`,
    amount: (i * 1.25).toFixed(2),
  });
  const lines = ['id,name,email,amount'];
  for (let i = 1; i <= count; i++) {
    const r = row(i);
    lines.push(`${r.id},${r.name},${r.email},${r.amount}`);
  }
  await writeFile(path, lines.join('\n') + '\n');
  return row(1);
}
