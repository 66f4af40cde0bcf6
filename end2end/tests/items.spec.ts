// A job of a registered type (issue 14) on its page: its items listed, and kept current as
// items are added, the job is sealed, and a worker reports their results and failures.
import { expect, test } from './app';
import { expectHydrated, signedIn } from './pages';

test('a job of a registered type shows its progress and item results live on its page', async ({ browser, app }) => {
  const admin = `admin_${Date.now().toString(36)}@example.com`;
  app.addUser(admin, 'admin');
  const page = await signedIn(browser, admin);
  const type = `render-${Date.now().toString(36)}`;
  const registered = await page.request.post('/api/job-types', { data: { name: type } });
  expect(registered.status()).toBe(201);
  const created = await page.request.post('/api/jobs', {
    data: {
      jobType: type,
      items: [{ payload: { frame: 1 } }, { payload: { frame: 2 } }, { payload: { frame: 3 } }],
    },
  });
  expect(created.status()).toBe(202);
  const job = await created.json();

  await page.goto(`/jobs/${job.id}`);
  await expectHydrated(page);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`${type} job`);
  await expect(page.getByTestId('job-message')).toHaveText('Waiting for job to start...');
  await expect(page.getByTestId('job-rows')).toHaveText('0 of 3 items so far');
  const rows = page.getByTestId('item-row');
  await expect(rows).toHaveCount(3);
  await expect(rows.first()).toContainText('{"frame":1}');
  await expect(rows.first()).toHaveAttribute('data-state', 'pending');
  await expect(page.getByText('Waits for a worker of its type to claim an item (more items may be added until it is sealed).')).toBeVisible();

  // Added and sealed by the API while the page is open: it follows.
  const added = await page.request.post(`/api/jobs/${job.id}/items`, {
    data: { items: [{ payload: { frame: 4 } }, { payload: { frame: 5 } }] },
  });
  expect(added.status()).toBe(200);
  await expect(page.getByTestId('job-rows')).toHaveText('0 of 5 items so far');
  await expect(rows).toHaveCount(5);
  const sealed = await page.request.post(`/api/jobs/${job.id}/seal`);
  expect(sealed.status()).toBe(200);
  await expect(page.getByTestId('job-rows')).toHaveText('0 of 5 items');

  // A worker (with a worker token) claims the items and reports on them: the page follows.
  const token = await page.request.post('/api/worker-tokens', { data: { name: 'e2e', types: [type] } });
  expect(token.status()).toBe(201);
  const worker = { Authorization: `Bearer ${(await token.json()).secret}` };
  const claimed = await page.request.post('/api/workers/e2e-worker/claims', {
    headers: worker,
    data: { max: 5 },
  });
  const assignments = (await claimed.json()).assignments;
  expect(assignments).toHaveLength(5);
  const report = async (a: { id: string; itemNo: number }) => {
    const ending = a.itemNo === 5
      ? page.request.post(`/api/assignments/${a.id}/failure`, {
          headers: worker,
          data: { message: 'frame 5 is corrupt', retry: false },
        })
      : page.request.post(`/api/assignments/${a.id}/result`, {
          headers: worker,
          data: { result: { thumbnail: `frame-${a.itemNo}.png` } },
        });
    expect((await ending).status()).toBe(200);
  };
  await report(assignments[0]);
  await expect(page.getByTestId('job-message')).toContainText('Job running, 20% complete');
  await expect(page.getByTestId('job-rows')).toHaveText('1 of 5 items');
  await expect(rows.first()).toHaveAttribute('data-state', 'done');
  await expect(rows.first()).toContainText('frame-1.png');
  for (const a of assignments.slice(1)) await report(a);
  await expect(page.getByTestId('job-rows')).toHaveText('5 of 5 items');
  await expect(page.getByText('1 of 5 items failed; see their failures below.')).toBeVisible();
  await expect(rows.nth(4)).toHaveAttribute('data-state', 'failed');
  await expect(rows.nth(4)).toContainText('frame 5 is corrupt');

  await page.getByRole('button', { name: 'Failed' }).click();
  await expect(rows).toHaveCount(1);
  await page.getByRole('button', { name: 'To do' }).click();
  await expect(page.getByTestId('item-table')).toContainText('No items.');
  await expect(rows).toHaveCount(0);
});
