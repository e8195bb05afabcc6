/**
 * Unit tests of the panel's model (node's built-in test runner: `jlpm test`).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  EXTENSION_MISSING,
  IJob,
  ILaunchForm,
  LogBuffer,
  MetricSeries,
  IDiagnosis,
  describeDiagnosis,
  describeLatest,
  describeStall,
  formatRanks,
  elapsedSeconds,
  explainFailure,
  filterAndSort,
  formatElapsed,
  formFieldOf,
  formatNumber,
  IFormSchema,
  IMetricsSummary,
  ISweep,
  ISweepSummary,
  ISweepTrial,
  describeBest,
  describeSweepSpec,
  describeTrials,
  formatG4,
  formatSetting,
  formatTrialValue,
  isServerWide,
  isSweepRunning,
  mergePages,
  sortTrials,
  sweepProgress,
  summaryEvents,
  IJobOption,
  optionsHint,
  parseOption,
  parseAlgorithmOptions,
  parseEnv,
  pickMainMetric,
  validateForm
} from '../src/model';

function job(id: string, created: number, state = 'running', extra: Partial<IJob> = {}): IJob {
  return { id, name: id, owner: 'u', backend: 'local', state, created, ...extra };
}

describe('job list', () => {
  it('sorts newest first and filters by state', () => {
    const jobs = [job('a', 1, 'succeeded'), job('b', 3), job('c', 2, 'failed'), job('d', 4)];
    assert.deepEqual(
      filterAndSort(jobs, '').map(j => j.id),
      ['d', 'b', 'c', 'a']
    );
    assert.deepEqual(
      filterAndSort(jobs, 'running').map(j => j.id),
      ['d', 'b']
    );
    assert.deepEqual(filterAndSort(jobs, 'cancelled'), []);
  });

  it('breaks ties on creation time by id, stably', () => {
    const jobs = [job('x1', 5), job('x3', 5), job('x2', 5)];
    assert.deepEqual(
      filterAndSort(jobs, '').map(j => j.id),
      ['x3', 'x2', 'x1']
    );
  });

  it('does not reorder the caller’s array', () => {
    const jobs = [job('a', 1), job('b', 2)];
    filterAndSort(jobs, '');
    assert.deepEqual(
      jobs.map(j => j.id),
      ['a', 'b']
    );
  });
});

describe('elapsed time', () => {
  it('counts from start to now while running', () => {
    assert.equal(elapsedSeconds(job('a', 100, 'running', { started: 110 }), 200), 90);
  });
  it('counts from creation while pending', () => {
    assert.equal(elapsedSeconds(job('a', 100, 'pending'), 130), 30);
  });
  it('stops at the end of a finished job', () => {
    const j = job('a', 100, 'succeeded', { started: 110, finished: 150 });
    assert.equal(elapsedSeconds(j, 10_000), 40);
  });
  it('is zero for a job cancelled before it ran, and never negative', () => {
    assert.equal(elapsedSeconds(job('a', 100, 'cancelled'), 10_000), 0);
    assert.equal(elapsedSeconds(job('a', 100, 'running', { started: 120 }), 110), 0);
  });
  it('formats seconds, minutes, hours and days', () => {
    assert.equal(formatElapsed(0), '0s');
    assert.equal(formatElapsed(59.9), '59s');
    assert.equal(formatElapsed(185), '3m 05s');
    assert.equal(formatElapsed(2 * 3600 + 7 * 60 + 3), '2h 07m');
    assert.equal(formatElapsed(86400 + 3 * 3600), '1d 03h');
    assert.equal(formatElapsed(-5), '0s');
  });
});

describe('main metric', () => {
  it('prefers loss, then close variants, then the first name', () => {
    assert.equal(pickMainMetric(['acc', 'loss', 'lr']), 'loss');
    assert.equal(pickMainMetric(['lr', 'val_loss', 'train_loss']), 'train_loss');
    assert.equal(pickMainMetric(['zeta', 'alpha']), 'alpha');
    assert.equal(pickMainMetric([]), undefined);
  });
  it('describes the latest event for the list', () => {
    assert.equal(
      describeLatest({ rank: 0, step: 40, values: { lr: 0.1, loss: 0.123456 } }),
      'loss 0.1235 @ 40'
    );
    assert.equal(describeLatest(null), '');
    assert.equal(describeLatest({ rank: 0, step: 1, values: {} }), '');
  });
  it('formats numbers compactly', () => {
    assert.equal(formatNumber(0.123456), '0.1235');
    assert.equal(formatNumber(12345.6), '1.235e+4');
    assert.equal(formatNumber(0.0001234), '1.234e-4');
    assert.equal(formatNumber(0), '0');
    assert.equal(formatNumber(3), '3');
  });
});

describe('MetricSeries', () => {
  it('aligns ranks on one step axis with gaps as null', () => {
    const s = new MetricSeries();
    s.add([
      { rank: 0, step: 2, values: { loss: 0.5 } },
      { rank: 0, step: 1, values: { loss: 1.0, acc: 0.1 } },
      { rank: 1, step: 1, values: { loss: 1.1 } }
    ]);
    assert.deepEqual(s.ranks(), [0, 1]);
    assert.deepEqual(s.metricNames(), ['loss', 'acc']);
    assert.deepEqual(s.aligned('loss'), [
      [1, 2],
      [1.0, 0.5],
      [1.1, null]
    ]);
    assert.deepEqual(s.aligned('acc'), [[1], [0.1], [null]]);
  });

  it('accumulates across polls and keeps the latest value of a repeated step', () => {
    const s = new MetricSeries();
    s.add([{ rank: 0, step: 1, values: { loss: 1 } }]);
    s.add([
      { rank: 0, step: 1, values: { loss: 0.9 } },
      { rank: 0, step: 2, values: { loss: 0.8 } }
    ]);
    assert.deepEqual(s.aligned('loss'), [
      [1, 2],
      [0.9, 0.8]
    ]);
  });

  it('shows the surviving attempt after a restart, not both over each other', () => {
    const s = new MetricSeries();
    const events = [];
    for (let step = 0; step <= 7; step++) {
      events.push({ rank: 0, step, attempt: 0, values: { loss: 10 - step } });
      events.push({ rank: 1, step, attempt: 0, values: { loss: 20 - step } });
    }
    s.add(events);
    // attempt 1 resumes from the checkpoint at step 5; rank 1 has not logged yet
    s.add([{ rank: 0, step: 5, attempt: 1, values: { loss: 4.5 } }]);
    assert.deepEqual(s.aligned('loss'), [
      [0, 1, 2, 3, 4, 5, 6, 7],
      [10, 9, 8, 7, 6, 4.5, null, null],
      [20, 19, 18, 17, 16, 15, 14, 13]
    ]);
    // a late event of the old attempt at a redone step is not drawn
    s.add([
      { rank: 0, step: 6, attempt: 0, values: { loss: 99 } },
      { rank: 0, step: 6, attempt: 1, values: { loss: 3.5 } },
      { rank: 1, step: 5, attempt: 1, values: { loss: 14.5 } }
    ]);
    assert.deepEqual(s.aligned('loss'), [
      [0, 1, 2, 3, 4, 5, 6],
      [10, 9, 8, 7, 6, 4.5, 3.5],
      [20, 19, 18, 17, 16, 14.5, null]
    ]);
  });

  it('ignores malformed events and non-numeric values', () => {
    const s = new MetricSeries();
    s.add([
      { rank: 0, step: 1, values: { loss: 1, note: 'x' as unknown as number } },
      { rank: 0 } as never,
      null as never
    ]);
    assert.deepEqual(s.metricNames(), ['loss']);
  });

  it('stays bounded on long runs and keeps the first and latest steps', () => {
    const s = new MetricSeries(100);
    const events = [];
    for (let step = 0; step < 10_000; step++) {
      events.push({ rank: 0, step, values: { loss: 1 / (step + 1) } });
    }
    s.add(events);
    assert.ok(s.size('loss') <= 100, `kept ${s.size('loss')} steps`);
    assert.ok(s.size('loss') >= 50, `kept only ${s.size('loss')} steps`);
    const [steps] = s.aligned('loss');
    assert.equal(steps[0], 0);
    assert.equal(steps[steps.length - 1], 9999);
  });

  it('returns empty data for an unknown metric', () => {
    assert.deepEqual(new MetricSeries().aligned('loss'), [[]]);
  });
});

describe('LogBuffer', () => {
  it('appends lines, moves the cursor and bounds the lines kept', () => {
    const b = new LogBuffer(3);
    b.append(['a', 'b'], 4);
    assert.equal(b.cursor, 4);
    assert.equal(b.text(), 'a\nb');
    b.append(['c', 'd', 'e'], 10);
    assert.deepEqual(b.lines, ['c', 'd', 'e']);
    assert.equal(b.dropped, 2);
    assert.equal(b.cursor, 10);
    assert.equal(b.text(), '… 2 earlier lines not shown\nc\nd\ne');
  });
});

describe('launch form', () => {
  // What `GET /alchemist/api/v1/` answers, in part (its `algorithms` and `job_options`).
  const option = (name: string, type: string, extra: Partial<IJobOption> = {}): IJobOption => ({
    name,
    type,
    default: null,
    help: name,
    label: name,
    ...extra
  });
  const schema: IFormSchema = {
    algorithms: ['sync', 'async', 'bmuf', 'easgd', 'horovod'],
    jobOptions: [
      option('workers', 'int', { default: 2, minimum: 1 }),
      option('algorithm', 'str', { choices: ['sync', 'async'] }),
      option('max_restarts', 'int', { default: 0, minimum: 0 }),
      option('timeout', 'float', { minimum: 0 }),
      option('global_batch', 'int', { minimum: 1 }),
      option('image', 'str')
    ]
  };
  const good: ILaunchForm = {
    path: '/work/train.py',
    workers: '2',
    gpusPerWorker: '0',
    algorithm: 'sync',
    algorithmOptions: '',
    backend: 'local',
    name: '',
    env: 'A=1\n# comment\n\nB = x=y\n'
  };

  it('builds the request body', () => {
    const r = validateForm(good);
    assert.ok(r.ok);
    assert.deepEqual(r.body, {
      path: 'work/train.py',
      workers: 2,
      gpus_per_worker: 0,
      algorithm: 'sync',
      backend: 'local',
      env: { A: '1', B: ' x=y' }
    });
  });

  it('sends algorithm options typed as the magics read them', () => {
    const r = validateForm({
      ...good,
      algorithm: 'bmuf',
      algorithmOptions:
        'block_size=32\nnesterov=False\nblock_lr = 0.5\n# note\nblock_momentum=1e-1\n'
    });
    assert.ok(r.ok);
    assert.deepEqual(r.body.algorithm_options, {
      block_size: 32,
      nesterov: false,
      block_lr: 0.5,
      block_momentum: 0.1
    });
    assert.deepEqual(parseAlgorithmOptions('compression=fp16'), {
      options: { compression: 'fp16' }
    });
  });

  it('hints each option with its default, and its meaning in the tooltip', () => {
    const hint = optionsHint([
      { name: 'block_size', default: '16', help: 'local steps per block' },
      { name: 'block_momentum', default: '1 - 1/N', help: 'block momentum' }
    ]);
    assert.equal(hint.placeholder, 'block_size=16\nblock_momentum=1 - 1/N');
    assert.match(hint.title, /\nblock_size=16: local steps per block\n/);
    assert.match(optionsHint(undefined).placeholder, /KEY=VALUE, one a line/);
  });

  it('maps the field a server error names to the form', () => {
    assert.equal(formFieldOf('algorithm_options'), 'algorithmOptions');
    assert.equal(formFieldOf('gpus_per_worker'), 'gpusPerWorker');
    assert.equal(formFieldOf('since'), undefined);
    assert.equal(formFieldOf(undefined), undefined);
  });

  it('includes a name only when given', () => {
    const r = validateForm({ ...good, name: ' run-1 ' });
    assert.ok(r.ok && r.body.name === 'run-1');
  });

  const bad: [Partial<ILaunchForm>, keyof ILaunchForm, RegExp][] = [
    [{ path: '' }, 'path', /choose/],
    [{ path: 'data.csv' }, 'path', /not a \.py or \.ipynb/],
    [{ workers: '0' }, 'workers', /≥ 1/],
    [{ workers: '1.5' }, 'workers', /whole number/],
    [{ workers: 'two' }, 'workers', /whole number/],
    [{ gpusPerWorker: '-1' }, 'gpusPerWorker', /≥ 0/],
    [{ algorithm: 'magic' }, 'algorithm', /sync, async/],
    [{ backend: ' ' }, 'backend', /backend/],
    [{ name: '-bad name' }, 'name', /letters/],
    [{ env: 'A=1\nnot a pair' }, 'env', /line 2: write KEY=VALUE/],
    [{ env: '1X=2' }, 'env', /not a valid variable name/],
    [{ algorithmOptions: 'block_size' }, 'algorithmOptions', /line 1: write KEY=VALUE/],
    [{ algorithmOptions: 'block-size=2' }, 'algorithmOptions', /not a valid option name/]
  ];
  for (const [change, field, message] of bad) {
    it(`names the field ${field} for ${JSON.stringify(change)}`, () => {
      const r = validateForm({ ...good, ...change }, schema);
      assert.equal(r.ok, false);
      if (!r.ok) {
        assert.equal(r.field, field);
        assert.match(r.message, message);
      }
    });
  }

  it('sends the server-listed options that were filled in, typed', () => {
    const r = validateForm(
      { ...good, extra: { max_restarts: '1', timeout: '2.5', global_batch: '', image: ' img:1 ' } },
      schema
    );
    assert.ok(r.ok);
    assert.equal(r.body.max_restarts, 1);
    assert.equal(r.body.timeout, 2.5);
    assert.equal(r.body.image, 'img:1');
    assert.ok(!('global_batch' in r.body), 'an empty field is the server default');
    // a hand-laid field (workers) is read from its own input only
    const own = validateForm({ ...good, extra: { workers: '9' } }, schema);
    assert.ok(own.ok && own.body.workers === 2);
  });

  it('a new server option is a new form field with no change here', () => {
    const withNew = { ...schema, jobOptions: [...schema.jobOptions, option('shm', 'names')] };
    const r = validateForm({ ...good, extra: { shm: 'a, b' } }, withNew);
    assert.ok(r.ok);
    assert.deepEqual(r.body.shm, ['a', 'b']);
    assert.equal(formFieldOf('shm', ['shm']), 'shm');
  });

  const badExtra: [Record<string, string>, string, RegExp][] = [
    [{ max_restarts: '-1' }, 'max_restarts', /whole number ≥ 0/],
    [{ max_restarts: '1.5' }, 'max_restarts', /whole number/],
    [{ timeout: 'soon' }, 'timeout', /must be a number/],
    [{ global_batch: '0' }, 'global_batch', /≥ 1/]
  ];
  for (const [extra, field, message] of badExtra) {
    it(`names the option ${field} for ${JSON.stringify(extra)}`, () => {
      const r = validateForm({ ...good, extra }, schema);
      assert.equal(r.ok, false);
      if (!r.ok) {
        assert.equal(r.field, field);
        assert.match(r.message, message);
      }
    });
  }

  it('reads a choice only among the server’s values', () => {
    assert.deepEqual(parseOption(option('x', 'str', { choices: ['a'] }), 'a'), { value: 'a' });
    assert.ok('error' in parseOption(option('x', 'str', { choices: ['a'] }), 'b'));
  });

  it('parses an empty env as no variables', () => {
    assert.deepEqual(parseEnv(''), { env: {} });
  });
});

describe('explainFailure', () => {
  it('shows the server’s message', () => {
    assert.equal(
      explainFailure({ status: 404, json: { message: 'no job abc' } }),
      'no job abc'
    );
  });
  it('says the server extension is missing when the route does not exist', () => {
    assert.equal(explainFailure({ status: 404, text: '<html>404</html>' }), EXTENSION_MISSING);
  });
  it('says the server cannot be reached on a network failure', () => {
    assert.match(explainFailure({ status: 0 }), /Cannot reach the Jupyter server/);
  });
  it('gives a status-specific line otherwise', () => {
    assert.match(explainFailure({ status: 403, text: 'Forbidden' }), /log in again/);
    assert.match(explainFailure({ status: 500, text: 'boom' }), /answered 500/);
  });
});

describe('stall note and diagnosis', () => {
  const report: IDiagnosis = {
    job_id: 'j1',
    state: 'running',
    classification: 'missing_rank',
    headline:
      'rank 1 has not reached all_reduce; it is in `load_batch` (cell line 4); ' +
      'rank 0 waits in all_reduce from the cell (line 12)',
    ranks: [
      {
        rank: 0,
        liveness: 'running',
        step: 9,
        answered: true,
        code: 'dist.all_reduce(torch.ones(1))',
        line: 'rank 0  running  step 9 (3 s ago)  in all_reduce from the cell (line 12)'
      },
      {
        rank: 1,
        liveness: 'running',
        step: 4,
        answered: false,
        code: null,
        line: 'rank 1  running  step 4 (3 s ago)  no stacks'
      }
    ],
    groups: [
      {
        ranks: [0],
        summary: 'all_reduce ← <cell>:12',
        frames: [
          { file: '/x/torch/distributed/c10d.py', line: 2, function: 'all_reduce' },
          { file: '<cell>', line: 12, function: '<module>' }
        ]
      }
    ],
    notes: ['rank 1 did not answer with stacks'],
    partial: true
  };

  it('shows the stall note of a stalled job only', () => {
    assert.equal(
      describeStall(job('a', 1, 'running', { stalled: 'no rank advanced for 41 s' })),
      'stalled: no rank advanced for 41 s'
    );
    assert.equal(describeStall(job('a', 1, 'running', { stalled: null })), '');
    assert.equal(describeStall(job('a', 1)), '');
  });

  it('words rank ranges as the report does', () => {
    assert.equal(formatRanks([7, 6, 0, 1, 2, 4]), 'ranks 0–2, 4, 6–7');
    assert.equal(formatRanks([3]), 'rank 3');
  });

  it('renders the headline, a line per rank, grouped stacks and notes', () => {
    const view = describeDiagnosis(report);
    assert.equal(view.headline, report.headline);
    assert.equal(view.classification, 'missing_rank');
    assert.deepEqual(view.ranks, [
      { rank: 0, text: report.ranks[0].line, code: 'dist.all_reduce(torch.ones(1))' },
      { rank: 1, text: 'rank 1  running  step 4 (3 s ago)  no stacks', code: '' }
    ]);
    assert.deepEqual(view.groups, [
      {
        title: 'rank 0: all_reduce ← <cell>:12',
        frames: ['all_reduce (/x/torch/distributed/c10d.py:2)', '<module> (<cell>:12)']
      }
    ]);
    assert.deepEqual(view.notes, [
      'rank 1 did not answer with stacks',
      'partial: some running ranks gave no stacks'
    ]);
  });

  it('renders a report without ranks or groups (a job that ended)', () => {
    const view = describeDiagnosis({
      ...report,
      classification: 'not_running',
      headline: 'job j1 succeeded',
      ranks: [],
      groups: [],
      notes: [],
      partial: false
    });
    assert.deepEqual(
      [view.headline, view.ranks, view.groups, view.notes],
      ['job j1 succeeded', [], [], []]
    );
  });
});

describe('older pages of the job list', () => {
  it('shows each job once, the polled copy winning, newest first', () => {
    const newest = [job('d', 4), job('c', 3, 'succeeded')];
    // "c" was on the newest page when the older page was fetched, then pushed off it.
    const older = [job('c', 3, 'running'), job('b', 2), job('a', 1)];
    const merged = mergePages(newest, older);
    assert.deepEqual(
      merged.map(j => j.id),
      ['d', 'c', 'b', 'a']
    );
    assert.equal(merged[1].state, 'succeeded');
    assert.deepEqual(
      filterAndSort(merged, 'running').map(j => j.id),
      ['d', 'b', 'a']
    );
  });
});

describe('metrics summary', () => {
  it('becomes events that draw every rank of every metric', () => {
    const summary: IMetricsSummary = {
      view: 'summary',
      metrics: ['loss', 'lr'],
      series: [
        { metric: 'loss', rank: 0, count: 1000, steps: [0, 500, 999], values: [2, 1, 0.5] },
        { metric: 'loss', rank: 1, count: 1000, steps: [0, 999], values: [2.1, 0.6] },
        { metric: 'lr', rank: 0, count: 3, steps: [0, 1], values: [0.1, 0.05, 0.01] }
      ],
      cursor: 'x',
      complete: true
    };
    const events = summaryEvents(summary);
    assert.equal(events.length, 3 + 2 + 2); // a series' points are its shorter array
    const series = new MetricSeries();
    series.add(events);
    assert.deepEqual(series.metricNames(), ['loss', 'lr']);
    assert.deepEqual(series.ranks(), [0, 1]);
    assert.deepEqual(series.aligned('loss'), [
      [0, 500, 999],
      [2, 1, 0.5],
      [2.1, null, 0.6]
    ]);
    // Events read on from the cursor extend the same curves.
    series.add([{ rank: 0, step: 1000, values: { loss: 0.4 } }]);
    assert.equal(series.size('loss'), 4);
  });
});

function trial(
  number: number,
  x: unknown,
  state: string,
  value: number | null,
  reason: string | null = null
): ISweepTrial {
  return {
    number,
    params: { x },
    state,
    job_id: `j${String(number).padStart(10, '0')}`,
    value,
    step: value === null ? null : 9,
    reason
  };
}

// The trials of tests/sweep/test_sweep_cli_rest.py (the CLI's order is the same).
const TRIALS = [
  trial(0, 1, 'failed', null, 'failed: CUDA out of memory'),
  trial(1, 2, 'complete', 0.5),
  trial(2, 3, 'pruned', 0.1, 'pruned by sweep at step 9'), // better, but not a result
  trial(3, 4, 'complete', 0.25)
];

function sweep(mode: string, trials: ISweepTrial[], state = 'succeeded'): ISweep {
  return {
    id: 'w0123456789',
    name: 'grid',
    created: 1,
    state,
    spec: { objective: 'loss', mode, trials: 4, parallel: 2, sampler: 'grid' },
    trials
  };
}

describe('sweeps', () => {
  it('sorts trials best first by the mode: complete, then other values, then none', () => {
    assert.deepEqual(
      sortTrials(TRIALS, 'min').map(t => t.number),
      [3, 1, 2, 0]
    );
    assert.deepEqual(
      sortTrials(TRIALS, 'max').map(t => t.number),
      [1, 3, 2, 0]
    );
    assert.deepEqual(
      TRIALS.map(t => t.number),
      [0, 1, 2, 3]
    ); // the caller's array is not reordered
  });

  it('breaks ties by number and puts running trials with a value after the complete', () => {
    const trials = [
      trial(5, 1, 'running', 0.9),
      trial(4, 2, 'complete', 0.5),
      trial(2, 3, 'complete', 0.5),
      trial(1, 4, 'waiting', null),
      { ...trial(0, 5, 'failed', null), value: Number.NaN }
    ];
    assert.deepEqual(
      sortTrials(trials, 'max').map(t => t.number),
      [2, 4, 5, 0, 1]
    );
  });

  it('writes values and settings as the CLI does (Python’s .4g and repr)', () => {
    assert.equal(formatG4(0.21), '0.21');
    assert.equal(formatG4(0.00012), '0.00012');
    assert.equal(formatG4(1e-5), '1e-05');
    assert.equal(formatG4(123456), '1.235e+05');
    assert.equal(formatG4(1000), '1000');
    assert.equal(formatG4(2.5), '2.5');
    assert.equal(formatG4(-0.123456), '-0.1235');
    assert.equal(formatTrialValue(null), '-');
    assert.equal(formatTrialValue(Number.POSITIVE_INFINITY), '-');
    assert.equal(
      formatSetting({ lr: 0.00031622776, act: 'relu', batch: 64, bn: true }),
      "lr=0.0003162, act='relu', batch=64, bn=True"
    );
    assert.equal(formatSetting({}), '');
  });

  it('shows a sweep in one row: progress and the best value with its setting', () => {
    const summary: ISweepSummary = {
      id: 'w0123456789',
      name: 'grid',
      created: 1,
      state: 'running',
      objective: 'val_acc',
      mode: 'max',
      trials_total: 4,
      trials_done: 3,
      best: trial(1, 0.3, 'complete', 0.95)
    };
    assert.equal(sweepProgress(summary), '3/4 trials');
    assert.equal(describeBest(summary.best, summary.objective), 'val_acc=0.95 (x=0.3)');
    assert.equal(describeBest(null, 'val_acc'), '');
    assert.ok(isSweepRunning(summary.state));
    assert.ok(!isSweepRunning('succeeded') && !isSweepRunning('cancelled'));
  });

  it('shows a sweep’s trials as table rows, best first', () => {
    const rows = describeTrials(sweep('min', TRIALS));
    assert.deepEqual(
      rows.map(r => [r.number, r.setting, r.state, r.step, r.value, r.jobId]),
      [
        [3, 'x=4', 'complete', '9', '0.25', 'j0000000003'],
        [1, 'x=2', 'complete', '9', '0.5', 'j0000000001'],
        [2, 'x=3', 'pruned', '9', '0.1', 'j0000000002'],
        [0, 'x=1', 'failed', '-', '-', 'j0000000000']
      ]
    );
    assert.equal(rows[3].reason, 'failed: CUDA out of memory');
    assert.equal(rows[0].reason, '');
    const waiting = describeTrials(
      sweep('max', [{ number: 0, params: {}, state: 'waiting', reason: 'a\n  b' }])
    );
    assert.deepEqual(waiting[0], {
      number: 0,
      setting: '-',
      state: 'waiting',
      step: '-',
      value: '-',
      reason: 'a b',
      jobId: ''
    });
    assert.equal(
      describeSweepSpec(sweep('min', TRIALS)),
      'minimise loss · grid, 4 trials, 2 at once'
    );
  });

  it('leaves a failure the job list already shows to the job list', () => {
    assert.ok(isServerWide({ status: 0, text: 'TypeError: failed to fetch' }));
    assert.ok(isServerWide({ status: 404, text: '<html>' }));
    assert.ok(!isServerWide({ status: 500, json: { message: 'sweep w1: unreadable' } }));
  });
});
