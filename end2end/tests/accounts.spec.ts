import { writeFile } from 'node:fs/promises';
import type { Page } from '@playwright/test';
import { PASSWORD, Worker, expect, test } from './app';
import { JobListPage, JobPage, MESSAGES, UploadPage, expectHydrated, signedIn } from './pages';

let worker: Worker | undefined;

test.afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

/** Imports a small file from the upload page; the new job's id (it waits: no worker runs). */
async function importSmall(page: Page, testInfo: { outputPath(name: string): string }, dataset: string) {
  const file = testInfo.outputPath(`${dataset}.csv`);
  await writeFile(file, 'id,name\n1,Ada\n2,Grace\n');
  const upload = new UploadPage(page);
  await upload.goto();
  return upload.importFile(file, dataset);
}

test('sign up and sign in; members see only their own jobs, admins all, viewers change nothing', async ({
  browser,
  app,
}, testInfo) => {
  test.setTimeout(120_000);
  const stamp = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const [a, b, admin, viewer] = ['a', 'b', 'admin', 'viewer'].map((who) => `${who}-${stamp}@example.com`);

  // Member A signs up on the sign-up page and imports a file.
  const pageA = await (await browser.newContext()).newPage();
  await pageA.goto('/signup');
  await expectHydrated(pageA);
  await pageA.getByTestId('email-input').fill(a);
  await pageA.getByTestId('password-input').fill(PASSWORD);
  await pageA.getByTestId('sign-up-button').click();
  await expect(pageA.getByTestId('signed-in-as')).toHaveText(a);
  await expect(pageA.getByTestId('role')).toHaveText('member');
  const jobA = await importSmall(pageA, testInfo, `a_${stamp}`);
  await expect(new JobPage(pageA).message).toHaveText(MESSAGES.waiting);

  // Member B (an account made by the operator) signs in and imports their own.
  app.addUser(b, 'member');
  const pageB = await signedIn(browser, b);
  const jobB = await importSmall(pageB, testInfo, `b_${stamp}`);

  // B cannot open A's job page, and B's list has only B's job.
  const direct = await pageB.goto(`/jobs/${jobA}`);
  expect(direct?.status()).toBe(404);
  await expect(pageB.getByRole('heading', { name: 'Not found' })).toBeVisible();
  const listB = new JobListPage(pageB);
  await listB.goto();
  await expect(listB.rowFor(jobB)).toHaveCount(1);
  await expect(listB.rowFor(jobA)).toHaveCount(0);

  // The admin sees both, with their owners, and may cancel A's job.
  app.addUser(admin, 'admin');
  const pageAdmin = await signedIn(browser, admin);
  const listAdmin = new JobListPage(pageAdmin);
  await listAdmin.goto();
  await expect(listAdmin.rowFor(jobA).getByTestId('job-owner')).toHaveText(a);
  await expect(listAdmin.rowFor(jobB).getByTestId('job-owner')).toHaveText(b);
  await expect(pageAdmin.getByRole('link', { name: 'Users' })).toBeVisible();

  // The viewer sees A's job with Cancel shown but disabled; once the admin has cancelled it,
  // Retry appears, disabled too.
  app.addUser(viewer, 'viewer');
  const pageViewer = await signedIn(browser, viewer);
  await pageViewer.goto(`/jobs/${jobA}`);
  await expectHydrated(pageViewer);
  const viewerJob = new JobPage(pageViewer);
  await expect(viewerJob.message).toHaveText(MESSAGES.waiting);
  await expect(pageViewer.getByTestId('job-owner')).toHaveText(`Owner: ${a}`);
  await expect(pageViewer.getByTestId('cancel-job')).toBeDisabled();
  await expect(pageViewer.getByRole('link', { name: 'Users' })).toHaveCount(0);

  await pageAdmin.goto(`/jobs/${jobA}`);
  await expectHydrated(pageAdmin);
  await expect(pageAdmin.getByTestId('cancel-job')).toBeEnabled();
  await pageAdmin.getByTestId('cancel-job').click();
  await expect(new JobPage(pageAdmin).message).toHaveText('Job cancelled');
  await expect(viewerJob.message).toHaveText('Job cancelled');
  await expect(pageViewer.getByTestId('retry-job')).toBeDisabled();
  // A sees it cancelled too, and may retry it.
  await pageA.goto(`/jobs/${jobA}`);
  await expectHydrated(pageA);
  await expect(pageA.getByTestId('retry-job')).toBeEnabled();

  // Signing out: back to a visitor.
  await pageB.getByTestId('sign-out').click();
  await expect(pageB.getByTestId('sign-in-link')).toBeVisible();
  await expect(pageB.getByTestId('signed-in-as')).toHaveCount(0);
});

test('a guest imports, then signs up and keeps the job', async ({ page, app }, testInfo) => {
  const dataset = `guest_${Date.now().toString(36)}`;
  const jobId = await importSmall(page, testInfo, dataset);
  worker = await Worker.start(app);
  await expect(new JobPage(page).message).toHaveText(MESSAGES.complete, { timeout: 60_000 });
  await expect(page.getByTestId('guest')).toBeVisible();

  await page.goto('/signup');
  await expectHydrated(page);
  await expect(page.getByText('You keep the jobs and datasets you made as a guest.')).toBeVisible();
  const email = `${dataset}@example.com`;
  await page.getByTestId('email-input').fill(email);
  await page.getByTestId('password-input').fill(PASSWORD);
  await page.getByTestId('sign-up-button').click();
  await expect(page.getByTestId('signed-in-as')).toHaveText(email);
  const list = new JobListPage(page);
  await list.goto();
  await expect(list.rowFor(jobId).getByTestId('job-status')).toHaveText('completed');
});

test('hostile names are shown as text after hydration', async ({ page, app }, testInfo) => {
  const evil = '</script><img src=x onerror=alert(1)>';
  let dialogs = 0;
  page.on('dialog', async (dialog) => {
    dialogs += 1;
    await dialog.dismiss();
  });
  const file = testInfo.outputPath('hostile.csv');
  await writeFile(file, `${evil}\n1\n`);
  const dataset = `hostile_${Date.now().toString(36)}`;
  const upload = new UploadPage(page);
  await upload.goto();
  await upload.importFile(file, dataset);
  worker = await Worker.start(app);
  await expect(new JobPage(page).message).toHaveText(MESSAGES.complete, { timeout: 60_000 });

  await page.goto(`/datasets/${dataset}`);
  await expectHydrated(page);
  await expect(page.getByTestId('dataset-rows').locator('th')).toHaveText([evil]);
  await expect(page.getByTestId('dataset-schema')).toContainText(evil);
  await expect(page.locator('img[src="x"]')).toHaveCount(0);
  expect(dialogs).toBe(0);
});
