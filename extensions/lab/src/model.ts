/**
 * The panel's logic, free of JupyterLab and the DOM so that it can be unit-tested
 * with the node test runner: job list filtering and ordering, elapsed times, the
 * main metric, incremental metric series for the charts, bounded per-rank log
 * buffers, launch-form validation and the one-line explanation of a failed request.
 */

/*
 * The lists of job states, algorithms and backends, and the job options the launch
 * form offers, come from the server (`GET /alchemist/api/v1/`: alchemist/job/options.py is
 * the one table); nothing here repeats them.
 */

/** States that never change again (alchemist.job.spec.JobState.is_terminal). */
export const TERMINAL_STATES: ReadonlySet<string> = new Set([
  'succeeded',
  'failed',
  'cancelled'
]);

/** One metric event, as written by the worker-side reporter. */
export interface IMetricEvent {
  job_id?: string;
  rank: number;
  step: number;
  time?: number;
  /** The attempt it was logged in (torchrun's restart count; absent: 0). */
  attempt?: number;
  values: Record<string, number>;
}

/** A job as `GET /alchemist/api/v1/jobs` returns it (Job.to_dict plus `latest`). */
export interface IJob {
  id: string;
  name: string;
  owner: string;
  backend: string;
  state: string;
  reason?: string | null;
  created: number;
  started?: number | null;
  finished?: number | null;
  spec?: Record<string, unknown>;
  job_dir?: string;
  /** The newest metric event of the job, if it logged any. */
  latest?: IMetricEvent | null;
  /** While it runs and no rank advanced for the stall threshold: a note naming the laggard. */
  stalled?: string | null;
}

/** `stalled: <note>` for a stalled job, else an empty string. */
export function describeStall(job: IJob): string {
  return job.stalled ? `stalled: ${job.stalled}` : '';
}

/** True when the job will not change state again. */
export function isTerminal(state: string): boolean {
  return TERMINAL_STATES.has(state);
}

/**
 * Jobs newest first, keeping only those in `state` (all when `state` is empty).
 * Ties on the creation time are broken by id so the order is stable between polls.
 */
export function filterAndSort(jobs: readonly IJob[], state: string): IJob[] {
  return jobs
    .filter(j => !state || j.state === state)
    .sort((a, b) => b.created - a.created || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
}

/**
 * The job list the panel shows: the newest page (polled) followed by the older pages
 * the user asked for ("Older jobs"), each job once; the polled page's copy wins, as it
 * is the fresher. Newest first, as {@link filterAndSort} orders.
 */
export function mergePages(newest: readonly IJob[], older: readonly IJob[]): IJob[] {
  const seen = new Set(newest.map(j => j.id));
  return [...newest, ...older.filter(j => !seen.has(j.id))];
}

/** One downsampled series of `GET /jobs/{id}/metrics?view=summary`. */
export interface IMetricsSummarySeries {
  metric: string;
  rank: number;
  /** How many values the rank logged for it (the points are at most a bounded few). */
  count: number;
  steps: number[];
  values: number[];
}

/**
 * `GET /jobs/{id}/metrics?view=summary`: the whole history of every metric of every
 * rank, downsampled from the summary kept beside the metrics files. `cursor` is where
 * `?since=` reads on; `complete` is false while the server has not folded the newest
 * bytes yet (ask again: its work is cached).
 */
export interface IMetricsSummary {
  view: 'summary';
  metrics: string[];
  series: IMetricsSummarySeries[];
  cursor: string;
  complete: boolean;
}

/** A summary's points as metric events, for {@link MetricSeries.add}. */
export function summaryEvents(summary: IMetricsSummary): IMetricEvent[] {
  const events: IMetricEvent[] = [];
  for (const s of summary.series ?? []) {
    const n = Math.min(s.steps.length, s.values.length);
    for (let i = 0; i < n; i++) {
      events.push({ rank: s.rank, step: s.steps[i], values: { [s.metric]: s.values[i] } });
    }
  }
  return events;
}

/**
 * Seconds a job has run: from its start (its creation while pending) to its end
 * (now while it runs). Never negative.
 */
export function elapsedSeconds(job: IJob, nowSeconds: number): number {
  const start = job.started ?? job.created;
  const end = job.finished ?? (isTerminal(job.state) ? start : nowSeconds);
  return Math.max(0, end - start);
}

/** `42s`, `3m 05s`, `2h 07m`, `1d 03h`. */
export function formatElapsed(seconds: number): string {
  const s = Math.floor(Math.max(0, seconds));
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  }
  return `${Math.floor(s / 86400)}d ${pad(Math.floor((s % 86400) / 3600))}h`;
}

/** Metric names preferred as "the" metric of a job, best first. */
const MAIN_METRIC_PREFERENCE = ['loss', 'train_loss', 'training_loss', 'val_loss', 'accuracy'];

/**
 * The metric to show for a job: `loss` (or a close variant) when logged, else the
 * alphabetically first name. Undefined when there is none.
 */
export function pickMainMetric(names: Iterable<string>): string | undefined {
  const all = Array.from(new Set(names)).sort();
  for (const preferred of MAIN_METRIC_PREFERENCE) {
    if (all.includes(preferred)) {
      return preferred;
    }
  }
  return all[0];
}

/** A number in at most 4 significant digits (`0.1235`, `1.235e+4`). */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) {
    return String(value);
  }
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e4 || abs < 1e-3)) {
    return value.toExponential(3);
  }
  return String(Number(value.toPrecision(4)));
}

/** `loss 0.1235 @ 40` for the job list, or an empty string before any metric. */
export function describeLatest(latest: IMetricEvent | null | undefined): string {
  if (!latest || !latest.values) {
    return '';
  }
  const name = pickMainMetric(Object.keys(latest.values));
  if (name === undefined) {
    return '';
  }
  return `${name} ${formatNumber(latest.values[name])} @ ${latest.step}`;
}

/**
 * Metric events of one job gathered across polls, shaped for uPlot: per metric, one
 * shared x axis (steps, ascending) and one y series per rank with nulls where a
 * rank did not log that step.
 *
 * Memory is bounded: past `maxSteps` distinct steps of a metric, every other step is
 * dropped (the first and the latest are always kept), so a long run keeps its shape.
 *
 * Attempts (the rule of alchemist/metrics/attempts.py, as the monitor applies it): a
 * restarted job redoes the steps since its checkpoint, so when a rank's first event of
 * a newer attempt arrives at step `s`, that rank's values of earlier attempts at steps
 * `>= s` are dropped, and late events of an earlier attempt at such steps are ignored.
 * The curve shows the surviving attempt, not both over each other.
 */
export class MetricSeries {
  constructor(readonly maxSteps = 4000) {}

  /** Add events in any order; a repeated (metric, rank, step) keeps the latest value. */
  add(events: readonly IMetricEvent[]): void {
    for (const ev of events) {
      if (!ev || typeof ev.step !== 'number' || !ev.values) {
        continue;
      }
      const attempt = typeof ev.attempt === 'number' ? ev.attempt : 0;
      const cut = this._cuts.get(ev.rank);
      if (cut === undefined || attempt > cut.attempt) {
        if (cut !== undefined || attempt > 0) {
          this._dropFrom(ev.rank, ev.step);
        }
        this._cuts.set(ev.rank, { attempt, step: ev.step });
      } else if (attempt < cut.attempt && ev.step >= cut.step) {
        continue; // superseded by the newer attempt
      }
      for (const [name, value] of Object.entries(ev.values)) {
        if (typeof value !== 'number') {
          continue;
        }
        let metric = this._data.get(name);
        if (!metric) {
          metric = new Map();
          this._data.set(name, metric);
        }
        let perRank = metric.get(ev.step);
        if (!perRank) {
          perRank = new Map();
          metric.set(ev.step, perRank);
        }
        perRank.set(ev.rank, value);
        this._ranks.add(ev.rank);
        if (metric.size > this.maxSteps) {
          this._decimate(metric);
        }
      }
    }
  }

  /** Logged metric names, sorted, main metric first. */
  metricNames(): string[] {
    const names = Array.from(this._data.keys()).sort();
    const main = pickMainMetric(names);
    return main === undefined ? names : [main, ...names.filter(n => n !== main)];
  }

  /** Ranks that logged anything, ascending. */
  ranks(): number[] {
    return Array.from(this._ranks).sort((a, b) => a - b);
  }

  /** Number of distinct steps kept for `metric`. */
  size(metric: string): number {
    return this._data.get(metric)?.size ?? 0;
  }

  /**
   * uPlot's aligned data for `metric`: `[steps, rank r0 values, rank r1 values, ...]`
   * with one y array per entry of {@link ranks}.
   */
  aligned(metric: string): [number[], ...(number | null)[][]] {
    const metricData = this._data.get(metric) ?? new Map<number, Map<number, number>>();
    const steps = Array.from(metricData.keys()).sort((a, b) => a - b);
    const ranks = this.ranks();
    const ys = ranks.map(rank => steps.map(step => metricData.get(step)?.get(rank) ?? null));
    return [steps, ...ys];
  }

  /** Forget `rank`'s values at steps `>= step` (a newer attempt redoes them). */
  private _dropFrom(rank: number, step: number): void {
    for (const metric of this._data.values()) {
      for (const [s, perRank] of metric) {
        if (s >= step && perRank.delete(rank) && perRank.size === 0) {
          metric.delete(s);
        }
      }
    }
  }

  private _decimate(metric: Map<number, Map<number, number>>): void {
    const steps = Array.from(metric.keys()).sort((a, b) => a - b);
    for (let i = 1; i < steps.length - 1; i += 2) {
      metric.delete(steps[i]);
    }
  }

  private _data = new Map<string, Map<number, Map<number, number>>>();
  private _ranks = new Set<number>();
  /** Per rank: its newest attempt and the step that attempt started at. */
  private _cuts = new Map<number, { attempt: number; step: number }>();
}

/**
 * The tail of one rank's log, bounded to `maxLines` lines (the oldest are dropped and
 * counted), with the byte cursor for the next request.
 */
export class LogBuffer {
  constructor(readonly maxLines = 2000) {}

  cursor = 0;
  dropped = 0;

  get lines(): readonly string[] {
    return this._lines;
  }

  /** Append lines read from `cursor` and move the cursor to `nextCursor`. */
  append(lines: readonly string[], nextCursor: number): void {
    this._lines.push(...lines);
    const excess = this._lines.length - this.maxLines;
    if (excess > 0) {
      this._lines.splice(0, excess);
      this.dropped += excess;
    }
    this.cursor = nextCursor;
  }

  /** The text to show, with a first line saying how many older lines were dropped. */
  text(): string {
    const head = this.dropped > 0 ? [`… ${this.dropped} earlier lines not shown`] : [];
    return [...head, ...this._lines].join('\n');
  }

  private _lines: string[] = [];
}

/** What the launch form holds, as typed by the user. */
export interface ILaunchForm {
  path: string;
  workers: string;
  gpusPerWorker: string;
  algorithm: string;
  /** The algorithm's options, `KEY=VALUE` a line (`alchemist submit --algorithm-option`). */
  algorithmOptions: string;
  backend: string;
  name: string;
  env: string;
  /**
   * The text of every further job option's field (max restarts, timeout, image, ...),
   * by option name: the form builds these from the server's `job_options`.
   */
  extra?: Record<string, string>;
}

/** The JSON body of `POST /alchemist/api/v1/jobs` (and `/jobs/dryrun`). */
export interface ISubmitBody {
  path: string;
  workers: number;
  gpus_per_worker: number;
  algorithm: string;
  algorithm_options?: Record<string, OptionValue>;
  backend: string;
  name?: string;
  env: Record<string, string>;
  /** Further job options (`max_restarts`, `timeout`, `image`, ...), as the server names them. */
  [option: string]: unknown;
}

/** An algorithm option's value, as the magics and the CLI read it from text. */
export type OptionValue = string | number | boolean;

/**
 * The checked body, or the field at fault: a key of {@link ILaunchForm}, or the name
 * of a further job option (one of {@link ILaunchForm.extra}).
 */
export type FormResult =
  | { ok: true; body: ISubmitBody }
  | { ok: false; field: keyof ILaunchForm | string; message: string };

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const JOB_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * Parse environment variables typed one `KEY=VALUE` a line (blank lines and lines
 * starting with `#` are skipped; the value may contain `=`). `what` names a key in
 * errors (algorithm options are typed the same way).
 */
export function parseEnv(
  text: string,
  what = 'variable'
): { env: Record<string, string> } | { error: string } {
  const env: Record<string, string> = {};
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line || line.startsWith('#')) {
      continue;
    }
    const eq = line.indexOf('=');
    if (eq <= 0) {
      return { error: `line ${i + 1}: write KEY=VALUE, got ${JSON.stringify(line)}` };
    }
    const key = line.slice(0, eq).trim();
    if (!ENV_KEY.test(key)) {
      return { error: `line ${i + 1}: ${JSON.stringify(key)} is not a valid ${what} name` };
    }
    env[key] = line.slice(eq + 1);
  }
  return { env };
}

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

/**
 * Parse algorithm options typed one `KEY=VALUE` a line, with the magics' reading of
 * values: `true`/`false` are booleans, numbers are numbers, anything else is text.
 * The server checks names and ranges (one set of rules: alchemist/job/algorithms.py).
 */
export function parseAlgorithmOptions(
  text: string
): { options: Record<string, OptionValue> } | { error: string } {
  const parsed = parseEnv(text, 'option');
  if ('error' in parsed) {
    return parsed;
  }
  const options: Record<string, OptionValue> = {};
  for (const [key, raw] of Object.entries(parsed.env)) {
    const value = raw.trim();
    const low = value.toLowerCase();
    if (low === 'true' || low === 'false') {
      options[key] = low === 'true';
    } else {
      options[key] = NUMBER.test(value) ? Number(value) : value;
    }
  }
  return { options };
}

/** One option of an algorithm, as `GET /alchemist/api/v1/` lists it. */
export interface IOptionInfo {
  name: string;
  /** The default as text (`16`, `true`, or a rule such as `1 - 1/N`). */
  default: string;
  help: string;
}

/** One job option, as `GET /alchemist/api/v1/` lists it (alchemist/job/options.py). */
export interface IJobOption {
  name: string;
  /** `int`, `float`, `str`, `kv` (KEY=VALUE lines), `kv_typed` (typed values) or `names`. */
  type: string;
  default: unknown;
  help: string;
  /** The form's label. */
  label: string;
  /** The command-line spelling (`--max-restarts`). */
  flags?: string[];
  /** The `Resources` field it fills, if any. */
  resource?: string | null;
  /** The smallest valid number, if any. */
  minimum?: number | null;
  /** The valid values, where the list is fixed. */
  choices?: string[];
}

/** What `GET /alchemist/api/v1/` says about the server. */
export interface IServerInfo {
  version: string;
  backends: string[];
  algorithms: string[];
  states: string[];
  algorithm_options: Record<string, IOptionInfo[]>;
  job_options: IJobOption[];
}

/** What the form is checked against: the server's lists (empty: the server checks). */
export interface IFormSchema {
  algorithms: readonly string[];
  jobOptions: readonly IJobOption[];
}

/** The job options the form lays out by hand; every other one is a generated field. */
export const FORM_FIELDS: Readonly<Record<string, keyof ILaunchForm>> = {
  path: 'path',
  workers: 'workers',
  gpus_per_worker: 'gpusPerWorker',
  algorithm: 'algorithm',
  algorithm_options: 'algorithmOptions',
  backend: 'backend',
  name: 'name',
  env: 'env'
};

/** The server's options that get a generated field (all but {@link FORM_FIELDS}). */
export function extraOptions(options: readonly IJobOption[]): IJobOption[] {
  return options.filter(o => !(o.name in FORM_FIELDS));
}

/** The text shown in an empty field: the option's default, if it has one. */
export function defaultText(option: IJobOption): string {
  const d = option.default;
  return d === null || d === undefined || typeof d === 'object' ? '' : String(d);
}

/**
 * The options box's hint for one algorithm: its options at their defaults, greyed in
 * the empty box (`placeholder`), and with their meanings in the tooltip (`title`).
 */
export function optionsHint(options: IOptionInfo[] | undefined): {
  placeholder: string;
  title: string;
} {
  if (!options || options.length === 0) {
    const plain = 'KEY=VALUE, one a line; empty: the defaults';
    return { placeholder: plain, title: plain };
  }
  return {
    placeholder: options.map(o => `${o.name}=${o.default}`).join('\n'),
    title:
      'Defaults; type KEY=VALUE lines to change them:\n' +
      options.map(o => `${o.name}=${o.default}: ${o.help}`).join('\n')
  };
}

/**
 * The form field a server error names (`field` of a 400 reply), if the form has it:
 * a key of {@link ILaunchForm}, or one of the generated fields' option names `extra`.
 */
export function formFieldOf(
  serverField: unknown,
  extra: readonly string[] = []
): keyof ILaunchForm | string | undefined {
  if (typeof serverField !== 'string') {
    return undefined;
  }
  if (Object.prototype.hasOwnProperty.call(FORM_FIELDS, serverField)) {
    return FORM_FIELDS[serverField];
  }
  return extra.includes(serverField) ? serverField : undefined;
}

/**
 * One generated field's value, read by its option's type: undefined when left empty
 * (the server's default), else the value or the line to show.
 */
export function parseOption(
  option: IJobOption,
  text: string
): { value?: unknown } | { error: string } {
  const t = text.trim();
  if (!t) {
    return {};
  }
  const min = option.minimum ?? undefined;
  const what = option.label || option.name;
  if (option.type === 'int' || option.type === 'float') {
    const ok = option.type === 'int' ? /^[-+]?\d+$/.test(t) : NUMBER.test(t);
    const n = Number(t);
    if (!ok || (min !== undefined && n < min)) {
      const kind = option.type === 'int' ? 'a whole number' : 'a number';
      return { error: `${what} must be ${kind}${min !== undefined ? ` ≥ ${min}` : ''}` };
    }
    return { value: n };
  }
  if (option.type === 'kv' || option.type === 'kv_typed') {
    const parsed = option.type === 'kv' ? parseEnv(text) : parseAlgorithmOptions(text);
    if ('error' in parsed) {
      return parsed;
    }
    return { value: 'env' in parsed ? parsed.env : parsed.options };
  }
  if (option.type === 'names') {
    return { value: t.split(',').map(n => n.trim()).filter(n => n) };
  }
  if (option.choices && option.choices.length && !option.choices.includes(t)) {
    return { error: `${what}: choose one of ${option.choices.join(', ')}` };
  }
  return { value: t };
}

function parseCount(text: string, min: number): number | undefined {
  const t = text.trim();
  if (!/^\d+$/.test(t)) {
    return undefined;
  }
  const n = Number(t);
  return n >= min && Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Check the launch form and build the request body; on a mistake, name the field and
 * say what to type. The server validates again: this only saves a round trip.
 */
export function validateForm(
  form: ILaunchForm,
  schema: IFormSchema = { algorithms: [], jobOptions: [] }
): FormResult {
  const path = form.path.trim().replace(/^\/+/, '');
  if (!path) {
    return { ok: false, field: 'path', message: 'choose a .py or .ipynb file to run' };
  }
  if (!/\.(py|ipynb)$/.test(path)) {
    return { ok: false, field: 'path', message: `${path} is not a .py or .ipynb file` };
  }
  const workers = parseCount(form.workers, 1);
  if (workers === undefined) {
    return { ok: false, field: 'workers', message: 'workers must be a whole number ≥ 1' };
  }
  const gpus = parseCount(form.gpusPerWorker, 0);
  if (gpus === undefined) {
    return {
      ok: false,
      field: 'gpusPerWorker',
      message: 'GPUs per worker must be a whole number ≥ 0'
    };
  }
  if (schema.algorithms.length && !schema.algorithms.includes(form.algorithm)) {
    return {
      ok: false,
      field: 'algorithm',
      message: `choose one of ${schema.algorithms.join(', ')}`
    };
  }
  const algorithmOptions = parseAlgorithmOptions(form.algorithmOptions);
  if ('error' in algorithmOptions) {
    return { ok: false, field: 'algorithmOptions', message: algorithmOptions.error };
  }
  if (!form.backend.trim()) {
    return { ok: false, field: 'backend', message: 'choose a backend' };
  }
  const name = form.name.trim();
  if (name && !JOB_NAME.test(name)) {
    return {
      ok: false,
      field: 'name',
      message: "use 1-63 letters, digits, '.', '-' or '_', starting with a letter or digit"
    };
  }
  const parsed = parseEnv(form.env);
  if ('error' in parsed) {
    return { ok: false, field: 'env', message: parsed.error };
  }
  const body: ISubmitBody = {
    path,
    workers,
    gpus_per_worker: gpus,
    algorithm: form.algorithm,
    backend: form.backend.trim(),
    env: parsed.env
  };
  if (name) {
    body.name = name;
  }
  if (Object.keys(algorithmOptions.options).length) {
    body.algorithm_options = algorithmOptions.options;
  }
  for (const option of extraOptions(schema.jobOptions)) {
    const parsed = parseOption(option, form.extra?.[option.name] ?? '');
    if ('error' in parsed) {
      return { ok: false, field: option.name, message: parsed.error };
    }
    if (parsed.value !== undefined) {
      body[option.name] = parsed.value;
    }
  }
  return { ok: true, body };
}

/** What a failed request looked like, for {@link explainFailure}. */
export interface IFailure {
  /** HTTP status; 0 when no response came (network down, server stopped). */
  status: number;
  /** The parsed JSON body, or undefined when the body was not JSON. */
  json?: unknown;
  /** The raw body (an HTML page when the route does not exist). */
  text?: string;
}

export const EXTENSION_MISSING =
  'The Alchemist server extension is not running on this Jupyter server. ' +
  'Install alchemist in the server’s environment, run ' +
  '`jupyter server extension enable alchemist.server` and restart the server.';

/**
 * One line for the panel's message area: the server's own `message` when it sent
 * one, the missing-extension advice when the route does not exist, a reconnect hint
 * when the server did not answer.
 */
export function explainFailure(failure: IFailure): string {
  const json = failure.json as { message?: unknown } | undefined;
  if (json && typeof json === 'object' && typeof json.message === 'string' && json.message) {
    return json.message;
  }
  if (failure.status === 0) {
    return 'Cannot reach the Jupyter server: check that it is running, then reload the page.';
  }
  if (failure.status === 404) {
    return EXTENSION_MISSING;
  }
  if (failure.status === 403) {
    return 'The Jupyter server refused the request: log in again, then reload the page.';
  }
  return `The Alchemist server answered ${failure.status}: see the Jupyter server’s log.`;
}

/** A frame of a diagnosis report (most recent call first in a stack). */
export interface IDiagnosisFrame {
  file: string;
  line: number;
  function: string;
}

/** One rank of a diagnosis report (alchemist/diagnosis/report.py). */
export interface IDiagnosisRank {
  rank: number;
  liveness: string;
  step?: number | null;
  last_step_ago_s?: number | null;
  answered?: boolean;
  /** The text of the rank's innermost user line, when it is in the cell or script. */
  code?: string | null;
  /** The report's own summary: `rank 0  running  step 9 (3 s ago)  in all_reduce from …`. */
  line: string;
}

/** Ranks whose main-thread stacks are identical. */
export interface IDiagnosisGroup {
  ranks: number[];
  summary: string;
  frames: IDiagnosisFrame[];
}

/** `GET /jobs/{id}/diagnosis`: which rank is stuck, and where. */
export interface IDiagnosis {
  job_id: string;
  state: string;
  classification: string;
  headline: string;
  ranks: IDiagnosisRank[];
  groups: IDiagnosisGroup[];
  notes: string[];
  partial: boolean;
}

/** What the job view shows of a report: plain strings, rendered as text (never HTML). */
export interface IDiagnosisView {
  headline: string;
  classification: string;
  ranks: { rank: number; text: string; code: string }[];
  groups: { title: string; frames: string[] }[];
  notes: string[];
}

/** `[0, 1, 2, 4]` → `ranks 0–2, 4`; one rank is `rank 3` (as the report words it). */
export function formatRanks(ranks: readonly number[]): string {
  const all = Array.from(new Set(ranks)).sort((a, b) => a - b);
  if (all.length === 1) {
    return `rank ${all[0]}`;
  }
  const parts: string[] = [];
  let start = all[0];
  let prev = all[0];
  for (const r of [...all.slice(1), undefined]) {
    if (r !== undefined && r === prev + 1) {
      prev = r;
      continue;
    }
    parts.push(start === prev ? String(start) : `${start}–${prev}`);
    if (r !== undefined) {
      start = prev = r;
    }
  }
  return `ranks ${parts.join(', ')}`;
}

/** `load_batch (<cell>:5)`: a stack frame on one line. */
export function formatFrame(frame: IDiagnosisFrame): string {
  return `${frame.function} (${frame.file}:${frame.line})`;
}

/** The report as the job view shows it: headline, a line per rank, grouped stacks, notes. */
export function describeDiagnosis(report: IDiagnosis): IDiagnosisView {
  const notes = [...(report.notes ?? [])];
  if (report.partial) {
    notes.push('partial: some running ranks gave no stacks');
  }
  return {
    headline: report.headline,
    classification: report.classification,
    ranks: (report.ranks ?? []).map(r => ({ rank: r.rank, text: r.line, code: r.code ?? '' })),
    groups: (report.groups ?? []).map(g => ({
      title: `${formatRanks(g.ranks)}: ${g.summary}`,
      frames: (g.frames ?? []).map(formatFrame)
    })),
    notes
  };
}

/*
 * Sweeps (docs/sweeps.md): the panel lists them and shows one's trials best first, with
 * the rules of alchemist/sweep/text.py (the CLI's and the widget's tables).
 */

/** One trial of a sweep, as its driver's `trials.json` has it (each trial is a job). */
export interface ISweepTrial {
  number: number;
  /** The swept names' values, in the order the sweep names them. */
  params: Record<string, unknown>;
  /**
   * `waiting` (a grid's setting not started yet), `pending`, `queued`, `running`,
   * `complete`, `pruned` or `failed`.
   */
  state: string;
  job_id?: string | null;
  /** The objective's last value rank 0 logged (null before any, or when not finite). */
  value?: number | null;
  /** The step of that value. */
  step?: number | null;
  started?: number | null;
  finished?: number | null;
  /** Why it ended, for a pruned or failed trial. */
  reason?: string | null;
}

/** A sweep in `GET /alchemist/api/v1/sweeps` (alchemist.sweep.text.summary). */
export interface ISweepSummary {
  id: string;
  name: string;
  created: number;
  /** `running`, `succeeded`, `failed` or `cancelled`. */
  state: string;
  reason?: string | null;
  driver?: boolean;
  objective: string;
  /** `max` or `min`. */
  mode: string;
  sampler?: string;
  pruner?: string;
  /** The swept names as a user writes them (`lr=loguniform(0.0001,0.1)`). */
  params?: string[];
  trials_total: number;
  /** Trials complete, pruned or failed. */
  trials_done: number;
  counts?: Record<string, number>;
  /** The best complete trial, null until one is. */
  best?: ISweepTrial | null;
}

/** `GET /alchemist/api/v1/sweeps/{id}` (Sweep.to_dict). */
export interface ISweep {
  id: string;
  name: string;
  created: number;
  state: string;
  reason?: string | null;
  driver?: boolean;
  spec: {
    objective: string;
    mode: string;
    trials: number;
    parallel: number;
    sampler?: string;
    pruner?: string;
    [key: string]: unknown;
  };
  trials: ISweepTrial[];
  best?: ISweepTrial | null;
}

/** True while a sweep may still start or stop trials (it can be cancelled). */
export function isSweepRunning(state: string): boolean {
  return state === 'running';
}

function finiteNumber(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/**
 * A number in 4 significant digits as Python's `f"{v:.4g}"` writes it (the CLI's
 * tables): `0.21`, `1000`, `0.00012`, `1.235e+04`, `1e-05`.
 */
export function formatG4(value: number): string {
  if (!Number.isFinite(value)) {
    return String(value);
  }
  if (value === 0) {
    return '0';
  }
  const [mantissa, expText] = value.toExponential(3).split('e');
  const exp = Number(expText);
  if (exp < -4 || exp >= 4) {
    const digits = mantissa.replace(/\.?0+$/, '');
    return `${digits}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  return value
    .toFixed(3 - exp)
    .replace(/(\.\d*?)0+$/, '$1')
    .replace(/\.$/, '');
}

/** An objective's value as the tables show it, or `-` when there is none. */
export function formatTrialValue(value: unknown): string {
  const v = finiteNumber(value);
  return v === undefined ? '-' : formatG4(v);
}

/** One swept value as Python's `repr` writes it (floats in 4 significant digits). */
function formatParam(value: unknown): string {
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : formatG4(value);
  }
  if (typeof value === 'string') {
    return `'${value}'`;
  }
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  if (value === null || value === undefined) {
    return 'None';
  }
  return JSON.stringify(value);
}

/** `lr=0.001, act='relu'`: a trial's setting, as the CLI's tables write it. */
export function formatSetting(params: Record<string, unknown> | null | undefined): string {
  return Object.entries(params ?? {})
    .map(([name, value]) => `${name}=${formatParam(value)}`)
    .join(', ');
}

/**
 * The trials best first by the objective (`mode` `max`: highest first; else lowest):
 * the complete trials (their final values) first, then the others with a value (the
 * last so far, or where they were stopped), then those without one, each group in the
 * objective's order and ties by number (alchemist.sweep.text.sorted_trials). The first
 * row is the sweep's best whenever it has one. The caller's array is not reordered.
 */
export function sortTrials(trials: readonly ISweepTrial[], mode: string): ISweepTrial[] {
  const sign = mode === 'max' ? -1 : 1;
  const key = (t: ISweepTrial): [number, number, number] => {
    const v = finiteNumber(t.value);
    const number = Number(t.number) || 0;
    if (v === undefined) {
      return [2, 0, number];
    }
    return [t.state === 'complete' ? 0 : 1, sign * v, number];
  };
  return trials
    .map(t => ({ t, k: key(t) }))
    .sort((a, b) => a.k[0] - b.k[0] || a.k[1] - b.k[1] || a.k[2] - b.k[2])
    .map(({ t }) => t);
}

/** `3/4 trials`: how many trials are done (complete, pruned or failed) of how many. */
export function sweepProgress(sweep: ISweepSummary): string {
  return `${sweep.trials_done}/${sweep.trials_total} trials`;
}

/** `val_acc=0.95 (lr=0.3)`: the best trial's value and setting, or an empty string. */
export function describeBest(best: ISweepTrial | null | undefined, objective: string): string {
  if (!best) {
    return '';
  }
  const setting = formatSetting(best.params);
  return `${objective}=${formatTrialValue(best.value)}` + (setting ? ` (${setting})` : '');
}

/** `maximise val_acc · tpe, 10 trials, 2 at once`: what a sweep searches, in one line. */
export function describeSweepSpec(sweep: ISweep): string {
  const s = sweep.spec;
  const search = [
    s.sampler,
    `${s.trials} trial${s.trials === 1 ? '' : 's'}`,
    `${s.parallel} at once`
  ].filter(Boolean);
  return `${s.mode}imise ${s.objective} · ${search.join(', ')}`;
}

/** One row of a sweep's trials table: plain strings, rendered as text. */
export interface ITrialRow {
  number: number;
  setting: string;
  state: string;
  step: string;
  value: string;
  /** Why it stopped (pruned, failed), on one line; empty otherwise. */
  reason: string;
  /** The trial's job, to open (empty before it has one). */
  jobId: string;
}

/** A sweep's trials as the panel's table shows them, best first ({@link sortTrials}). */
export function describeTrials(sweep: ISweep): ITrialRow[] {
  return sortTrials(sweep.trials ?? [], sweep.spec.mode).map(t => ({
    number: t.number,
    setting: formatSetting(t.params) || '-',
    state: t.state,
    step: typeof t.step === 'number' ? String(t.step) : '-',
    value: formatTrialValue(t.value),
    reason: (t.reason ?? '').split(/\s+/).filter(Boolean).join(' '),
    jobId: t.job_id ?? ''
  }));
}

/**
 * True when a failure is not the API's own answer (no reply, no such route, a proxy's
 * page: no JSON body). The job list's message line already says what is wrong then, so
 * the sweeps section adds no second line.
 */
export function isServerWide(failure: IFailure): boolean {
  return failure.json === undefined;
}
