import { Worker, expect, test } from './app';
import { expectHydrated, importAs, signedIn } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

test('a viewer watches the queue live: a worker comes alive, an import lands in the charts; a member is refused', async ({
  browser,
  app,
}) => {
  test.setTimeout(120_000);
  const stamp = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const [viewer, member] = ['viewer', 'member'].map((who) => `${who}-${stamp}@example.com`);
  app.addUser(viewer, 'viewer');
  app.addUser(member, 'member');

  const page = await signedIn(browser, viewer);
  await page.getByRole('link', { name: 'Queue' }).click();
  await expect(page).toHaveURL(/\/admin$/);
  await expectHydrated(page);
  await expect(page.getByRole('heading', { name: 'Queue health' })).toBeVisible();
  await expect(page.getByText('No worker process has run in the last hour')).toBeVisible();
  const hour = page.getByTestId('charts-hour');
  await expect(hour.getByTestId('rows-total')).toHaveText('0');

  // A member's import waits for a worker: the open page shows it as the oldest waiting job.
  const pageMember = await signedIn(browser, member);
  await expect(pageMember.getByRole('link', { name: 'Queue' })).toHaveCount(0);
  const id = await importAs(pageMember, `queue_${stamp}.csv`, 'id,name\n1,Ada\n2,Grace\n3,Linus\n');
  const oldest = page.getByTestId('tile-oldest').getByRole('link');
  await expect(oldest).toHaveAttribute('href', `/jobs/${id}`, { timeout: 15_000 });

  // A worker starts and runs it; the page, never reloaded, shows both.
  worker = await Worker.start(app);
  await expect(page.getByTestId('process').first()).toHaveAttribute('data-state', 'alive', { timeout: 15_000 });
  await expect(hour.getByTestId('rows-total')).toHaveText('3', { timeout: 15_000 });
  await expect(hour.getByTestId('jobs-completed')).toHaveText('1');
  await expect(page.getByTestId('tile-oldest')).toContainText('none');
  await expect(hour.locator('svg rect.rows')).toHaveCount(1);

  // The member gets the page's refusal, not the queue.
  const refused = await pageMember.goto('/admin');
  expect(refused?.status()).toBe(403);
  await expect(pageMember.getByText('Only admins and viewers can see the queue.')).toBeVisible();
});
