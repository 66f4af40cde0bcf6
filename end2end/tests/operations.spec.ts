import { Worker, expect, test } from './app';
import { JobListPage, importAs, signedIn } from './pages';

let worker: Worker | undefined;

const stamp = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
const poison = `poison_${stamp}`;
/** One attempt per part: a poisoned part fails its job at once. */
const ONE_ATTEMPT = { maxFailuresPerItem: 1 };

test.afterEach(async ({ app }) => {
  await worker?.stop();
  worker = undefined;
  app.healRows();
});

test('an admin filters to one owner\'s failed jobs, retries them all and watches them complete; a member sees only theirs; a viewer changes nothing', async ({
  browser,
  app,
}) => {
  test.setTimeout(180_000);
  const [a, b, admin, viewer] = ['a', 'b', 'admin', 'viewer'].map((who) => `${who}-${stamp}@example.com`);
  app.addUser(a, 'member');
  app.addUser(b, 'member');
  app.addUser(admin, 'admin');
  app.addUser(viewer, 'viewer');

  // Every row holding the marker fails to write, as a broken disk would make it: A's imports
  // fail, B's completes.
  app.poisonRows(poison);
  const pageA = await signedIn(browser, a);
  const pageB = await signedIn(browser, b);
  const failing = [];
  for (const n of [1, 2, 3]) {
    failing.push(await importAs(pageA, `a${n}_${stamp}.csv`, `id,name\n${n},${poison}\n`, ONE_ATTEMPT));
  }
  const bJob = await importAs(pageB, `b_${stamp}.csv`, 'id,name\n1,Grace\n', ONE_ATTEMPT);

  const pageAdmin = await signedIn(browser, admin);
  const list = new JobListPage(pageAdmin);
  await list.goto();
  worker = await Worker.start(app);
  for (const id of failing) {
    await expect(list.rowFor(id).getByTestId('job-status')).toHaveText('failed', { timeout: 60_000 });
  }
  await expect(list.rowFor(bJob).getByTestId('job-status')).toHaveText('completed', { timeout: 60_000 });
  app.healRows();

  // Filter: A's failed jobs. The filter is the URL.
  await pageAdmin.getByTestId('filter-owner').fill(a);
  await pageAdmin.locator('input[name="status"][value="failed"]').check();
  await pageAdmin.getByTestId('apply-filter').click();
  await pageAdmin.waitForURL(/status=failed/);
  expect(pageAdmin.url()).toContain(`owner=${encodeURIComponent(a)}`);
  await expect(list.rows).toHaveCount(3);
  await expect(pageAdmin.getByTestId('status-counts').locator('[data-status="failed"] strong')).toHaveText('3');
  await expect(pageAdmin.getByTestId('status-counts').locator('[data-status="completed"] strong')).toHaveText('0');

  // Retry all of them, after a confirmation that names the count; they go live to completed.
  await pageAdmin.getByTestId('retry-matching').click();
  await expect(pageAdmin.getByTestId('bulk-confirm')).toContainText('Retry all 3 jobs this filter selects?');
  await pageAdmin.getByTestId('bulk-go').click();
  await expect(pageAdmin.getByTestId('bulk-done')).toHaveText('Retried 3 jobs.');
  for (const id of failing) {
    await expect(list.rowFor(id).getByTestId('job-status')).toHaveText('completed', { timeout: 60_000 });
  }
  // The log says who did it.
  const log = await (await pageAdmin.request.get('/api/audit')).json();
  expect(log.entries[0]).toMatchObject({ actorEmail: admin, action: 'retry', matched: 3, changed: 3 });

  // Back: the whole list again.
  await pageAdmin.goBack();
  await expect(list.rows).toHaveCount(4);

  // A member sees only their own jobs, on the same page.
  const listB = new JobListPage(pageB);
  await listB.goto();
  await expect(listB.rows).toHaveCount(1);
  await expect(listB.rowFor(bJob)).toHaveCount(1);

  // A viewer sees every job, with every action disabled.
  const pageViewer = await signedIn(browser, viewer);
  const listViewer = new JobListPage(pageViewer);
  await listViewer.goto();
  await expect(listViewer.rows).toHaveCount(4);
  for (const action of ['retry-matching', 'cancel-matching', 'retry-selected', 'cancel-selected']) {
    await expect(pageViewer.getByTestId(action)).toBeDisabled();
  }
});

test('on a phone the list fits: nothing scrolls sideways', async ({ browser, app }) => {
  const email = `phone-${stamp}@example.com`;
  app.addUser(email, 'admin');
  const page = await signedIn(browser, email);
  const id = await importAs(page, `phone_${stamp}_with_a_rather_long_file_name_indeed.csv`, 'id\n1\n');
  await page.setViewportSize({ width: 390, height: 844 });
  const list = new JobListPage(page);
  await list.goto();
  await expect(list.rowFor(id)).toHaveCount(1);
  const overflow = await page.evaluate(
    () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
  );
  // What overflows, named, if anything does.
  const wide = await page.evaluate(() =>
    [...document.querySelectorAll('body *')]
      .filter((el) => el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
      .map((el) => `${el.tagName}.${el.className}: ${el.scrollWidth} px in ${el.clientWidth}`),
  );
  expect(overflow, wide.join('\n')).toBeLessThanOrEqual(0);
  const cancel = list.rowFor(id).getByTestId('cancel-job');
  await expect(cancel).toHaveAccessibleName(/^Cancel Import of phone_/);
  const box = await cancel.boundingBox();
  expect(box!.x + box!.width).toBeLessThanOrEqual(390);
});
