// validation-diff.test.js: the differential harness (scripts/validation-diff.mjs)
// against its fixture, recorded from main before "validate once, at the C
// entry" (issue 40 item 1). Every bad call keeps its code and message, except
// where the contract's ordering says otherwise (CONTRACT.md section 2: every
// JS-only failure ranks before every C failure). Such a case is one of:
// - two faults (a pair case): the call now reports what one of its faults
//   reports alone, where it reported the other's before, and the fault it
//   now reports is raised by JS (not a C status);
// - a disposed instance or cache: it now reports E_DISPOSED (liveness is
//   JS's), where a C rule's failure ranked first before.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createSdpa } from '../../js/index.js';
import { runCases, differences, explain, FIXTURE } from '../../scripts/validation-diff.mjs';

test('every bad call keeps its code and message, except where the new ordering says otherwise', async () => {
  const fixture = JSON.parse(readFileSync(FIXTURE, 'utf8'));
  const fromC = new Set();
  const now = await runCases(createSdpa, fromC);
  assert.is(Object.keys(now).length, Object.keys(fixture).length, 'the same cases');
  const diff = differences(fixture, now);
  const unexplained = diff.filter(([name, b, a]) => explain(name, b, a, fixture, fromC.has(name)) === null);
  assert.ok(fromC.size > 100, `the cases C rejects are seen as C's (${fromC.size})`);
  assert.equal(unexplained.map(([n, b, a]) => `${n}: ${JSON.stringify(b)} -> ${JSON.stringify(a)}`).slice(0, 20), [],
    `${unexplained.length} cases changed that the ordering does not explain`);
});

test('a pair whose faults swapped is explained only when the fault now reported is JS\'s', () => {
  const fixture = { 'call f': ['E_ARG', 'call: f'], 'call g': ['E_DIMS', 'call: g'], 'call f+g': ['E_DIMS', 'call: g'] };
  assert.is(explain('call f+g', fixture['call f+g'], fixture['call f'], fixture, false), 'pair');
  assert.is(explain('call f+g', fixture['call f+g'], fixture['call f'], fixture, true), null, 'a swap between two C rules');
  assert.is(explain('call f+g', fixture['call f+g'], ['E_ARG', 'call: h'], fixture, false), null, 'a third message');
});

test.run();
