/**
 * The Alchemist side panel (launch form, sweeps and their trials, job list) and the job
 * view opened in the main area (learning curves, per-rank logs, spec, cancel,
 * TensorBoard, attach cell).
 *
 * Both poll the REST API with a Lumino `Poll` that stands by while the widget is not
 * visible or the browser tab is hidden, so a closed panel costs the server nothing.
 */
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { ApiError, MetricsCursor, api } from './api';
import { CurveCharts } from './chart';
import {
  IFormSchema,
  IJob,
  IJobOption,
  ILaunchForm,
  IOptionInfo,
  IServerInfo,
  ISubmitBody,
  ISweep,
  ISweepSummary,
  LogBuffer,
  MetricSeries,
  defaultText,
  describeBest,
  describeDiagnosis,
  describeLatest,
  describeStall,
  describeSweepSpec,
  describeTrials,
  elapsedSeconds,
  extraOptions,
  filterAndSort,
  formFieldOf,
  formatElapsed,
  isServerWide,
  isSweepRunning,
  isTerminal,
  mergePages,
  optionsHint,
  summaryEvents,
  sweepProgress,
  validateForm
} from './model';

/** User settings (schema/plugin.json). */
export interface IPanelSettings {
  pollInterval: number;
  defaultBackend: string;
  defaultWorkers: number;
  defaultAlgorithm: string;
}

export const DEFAULT_SETTINGS: IPanelSettings = {
  pollInterval: 2000,
  defaultBackend: 'local',
  defaultWorkers: 2,
  defaultAlgorithm: 'sync'
};

/** What the panel asks of the application (commands live in index.ts). */
export interface IPanelHost {
  openJob(id: string): void;
  insertAttachCell(id: string): void;
}

type Attrs = Record<string, string | number | boolean | undefined>;

/** How long the server waits for the ranks' stacks (alchemist.diagnosis.collect). */
const DIAGNOSIS_WAIT_S = 3;
/** How often the job view asks for the partial report while the ranks answer. */
const PARTIAL_POLL_MS = 250;

/** Create an element; `class` sets className, `data-*` and other keys set attributes. */
function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) {
      continue;
    }
    if (key === 'class') {
      el.className = String(value);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  el.append(...children);
  return el;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A one-line message area: errors in red, notes in the normal colour. */
class MessageLine {
  readonly node = h('div', { class: 'jp-Alchemist-message', role: 'status' });

  error(text: string): void {
    this.node.textContent = text;
    this.node.dataset.kind = 'error';
  }

  note(text: string): void {
    this.node.textContent = text;
    this.node.dataset.kind = 'note';
  }

  clear(): void {
    this.node.textContent = '';
    delete this.node.dataset.kind;
  }
}

/**
 * The left-sidebar panel: launch form on top, then the user's sweeps (a collapsed
 * section, shown once there is one; a sweep opens on its trials), then the jobs.
 */
export class AlchemistPanel extends Widget {
  constructor(
    private _host: IPanelHost,
    private _settings: IPanelSettings = DEFAULT_SETTINGS
  ) {
    super();
    this.id = 'alchemist-panel';
    this.addClass('jp-Alchemist-panel');
    this.title.caption = 'Alchemist jobs';
    this._build();
    // The server says which algorithms, backends, states and job options there are
    // (alchemist/job/options.py is the one table); the form is completed from its answer.
    // Without one the form stays bare (the job list already says what is wrong).
    void api
      .info()
      .then(info => this._applyServerInfo(info))
      .catch(() => undefined);
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: { interval: _settings.pollInterval, backoff: true, max: 60_000 },
      name: 'alchemist:jobs',
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
    void this._poll.start();
    // The sweeps at the same cadence, with a backoff of their own: a failure to list
    // them never slows the jobs.
    this._sweepPoll = new Poll({
      auto: false,
      factory: () => this.refreshSweeps(),
      frequency: { interval: _settings.pollInterval, backoff: true, max: 60_000 },
      name: 'alchemist:sweeps',
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
    void this._sweepPoll.start();
  }

  /** Apply changed settings (poll interval; defaults of an untouched form). */
  updateSettings(settings: IPanelSettings): void {
    this._settings = settings;
    this._poll.frequency = { ...this._poll.frequency, interval: settings.pollInterval };
    this._sweepPoll.frequency = {
      ...this._sweepPoll.frequency,
      interval: settings.pollInterval
    };
    if (!this._formTouched) {
      this._fillDefaults();
    }
  }

  /** Put `path` in the form (the file browser's "Run as Alchemist job"). */
  setPath(path: string): void {
    this._inputs.path.value = path;
    this._formTouched = true;
    this._formMessage.clear();
    this._dryrun.textContent = '';
    this._launch.open = true;
    this._inputs.path.focus();
  }

  /** Fetch the job list now. Errors go to the message line and are rethrown for backoff. */
  async refresh(): Promise<void> {
    try {
      const { jobs, next } = await api.listJobs();
      if (this._older.length) {
        // Jobs pushed off the newest page by new ones stay shown, with the older pages.
        const kept = new Set(jobs.map(j => j.id));
        this._older = mergePages(
          this._jobs.filter(j => !kept.has(j.id)),
          this._older
        );
      } else {
        this._next = next ?? null;
      }
      this._jobs = jobs;
      this._listMessage.clear();
      this._renderJobs();
      // The warm pool's line is a note: a failure to read it never hides the jobs.
      void api
        .pool()
        .then(pool => this._renderPool(pool.text, pool.running))
        .catch(() => undefined);
    } catch (error) {
      this._listMessage.error(messageOf(error));
      throw error;
    }
  }

  /**
   * Fetch the sweeps now, and the open sweep's trials while it runs (or when it has not
   * been read yet). Errors go to the sweeps' message line and are rethrown for backoff;
   * one the job list already shows (no answer, no such route) is not said twice.
   */
  async refreshSweeps(): Promise<void> {
    try {
      const { sweeps } = await api.listSweeps();
      this._sweeps = sweeps ?? [];
      const id = this._openSweep;
      const summary = this._sweeps.find(s => s.id === id);
      if (id && !summary) {
        this._openSweep = ''; // gone (its folder removed): nothing to show
        this._sweep = undefined;
      } else if (summary) {
        const known = this._sweep?.id === id ? this._sweep : undefined;
        if (!known || isSweepRunning(known.state) || known.state !== summary.state) {
          const sweep = await api.getSweep(id);
          if (this._openSweep === id) {
            this._sweep = sweep;
            this._renderSweepDetail();
          }
        }
      }
      this._sweepMessage.clear();
      this._renderSweeps();
    } catch (error) {
      if (error instanceof ApiError && isServerWide(error.failure)) {
        this._sweepMessage.clear();
      } else {
        this._sweepMessage.error(messageOf(error));
      }
      this._renderSweeps();
      throw error;
    }
  }

  /** Cancel the open sweep and its running trials. */
  async cancelSweep(id: string): Promise<void> {
    const button = this._sweepCancel;
    button.disabled = true;
    this._sweepMessage.note('Cancelling the sweep and its running trials…');
    try {
      const sweep = await api.cancelSweep(id);
      if (this._openSweep === id) {
        this._sweep = sweep;
        this._renderSweepDetail();
      }
      this._sweepMessage.clear();
      void this._sweepPoll.refresh();
      void this._poll.refresh();
    } catch (error) {
      this._sweepMessage.error(messageOf(error));
      button.disabled = false;
    }
  }

  /** Fetch the next page of older jobs ("Older jobs") and show it below the others. */
  async loadOlder(): Promise<void> {
    if (!this._next) {
      return;
    }
    this._olderButton.disabled = true;
    try {
      const page = await api.listJobs('', this._next);
      this._older = mergePages(this._older, page.jobs);
      this._next = page.next ?? null;
      this._listMessage.clear();
      this._renderJobs();
    } catch (error) {
      this._listMessage.error(messageOf(error));
    } finally {
      this._olderButton.disabled = false;
    }
  }

  /** Show the dry-run of the form's job. */
  async showDryRun(): Promise<void> {
    const body = this._readForm();
    if (!body) {
      return;
    }
    this._formMessage.note('Preparing the dry run…');
    try {
      const info = await api.previewDryRun(body);
      this._dryrun.textContent = info.text;
      this._formMessage.clear();
    } catch (error) {
      this._dryrun.textContent = '';
      this._showFormError(error);
    }
  }

  /** Submit the form's job; on success open it. */
  async submit(): Promise<IJob | undefined> {
    const body = this._readForm();
    if (!body) {
      return undefined;
    }
    this._submitButton.disabled = true;
    this._formMessage.note('Submitting…');
    try {
      const job = await api.submit(body);
      this._formMessage.note(`Submitted ${job.name} (${job.id}).`);
      void this._poll.refresh();
      this._host.openJob(job.id);
      return job;
    } catch (error) {
      this._showFormError(error);
      return undefined;
    } finally {
      this._submitButton.disabled = false;
    }
  }

  protected onAfterShow(): void {
    void this._poll.refresh();
    void this._sweepPoll.refresh();
  }

  /** The warm pool's line under the jobs, with a Stop button while one runs. */
  private _renderPool(text: string, running: boolean): void {
    const stop = h('button', { class: 'jp-Button', type: 'button', title: 'Stop the warm pool (running jobs go on)' }, 'Stop');
    stop.addEventListener('click', () => {
      stop.disabled = true;
      void api
        .stopPool()
        .then(pool => this._renderPool(pool.text, pool.running))
        .catch(error => this._listMessage.error(messageOf(error)));
    });
    this._pool.replaceChildren(h('span', {}, text), ...(running ? [stop] : []));
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._sweepPoll.dispose();
    window.clearInterval(this._clock);
    super.dispose();
  }

  private _readForm(): ISubmitBody | undefined {
    const form: ILaunchForm = {
      path: this._inputs.path.value,
      workers: this._inputs.workers.value,
      gpusPerWorker: this._inputs.gpusPerWorker.value,
      algorithm: this._inputs.algorithm.value,
      algorithmOptions: this._inputs.algorithmOptions.value,
      backend: this._inputs.backend.value,
      name: this._inputs.name.value,
      env: this._inputs.env.value,
      extra: Object.fromEntries(
        Object.entries(this._extraInputs).map(([name, input]) => [name, input.value])
      )
    };
    const result = validateForm(form, this._schema);
    for (const input of this._allInputs()) {
      input.removeAttribute('aria-invalid');
    }
    if (!result.ok) {
      this._inputOf(result.field)?.setAttribute('aria-invalid', 'true');
      this._formMessage.error(result.message);
      return undefined;
    }
    return result.body;
  }

  /** A failed dry run or submit: the server's line, and its field marked invalid. */
  private _showFormError(error: unknown): void {
    const field =
      error instanceof ApiError
        ? formFieldOf(
            (error.failure.json as { field?: unknown } | undefined)?.field,
            Object.keys(this._extraInputs)
          )
        : undefined;
    if (field) {
      this._inputOf(field)?.setAttribute('aria-invalid', 'true');
    }
    this._formMessage.error(messageOf(error));
  }

  /** Every input of the form, the hand-laid and the generated. */
  private _allInputs(): HTMLElement[] {
    return [...Object.values(this._inputs), ...Object.values(this._extraInputs)];
  }

  /** The input of a form field: a key of ILaunchForm or a generated option's name. */
  private _inputOf(field: string): HTMLElement | undefined {
    const own: Record<string, HTMLElement> = this._inputs;
    return own[field] ?? this._extraInputs[field];
  }

  /** Fill the lists from the server's answer and add a field for every further option. */
  private _applyServerInfo(info: IServerInfo): void {
    this._optionInfo = info.algorithm_options ?? {};
    this._schema = { algorithms: info.algorithms ?? [], jobOptions: info.job_options ?? [] };
    const fill = (select: HTMLSelectElement, values: readonly string[], keep: string[] = []) =>
      select.replaceChildren(
        ...keep.map(v => h('option', { value: v }, v)),
        ...values.map(v => h('option', { value: v }, v))
      );
    fill(this._inputs.algorithm, this._schema.algorithms);
    fill(this._inputs.backend, info.backends ?? []);
    fill(this._stateFilter, info.states ?? [], ['']);
    this._stateFilter.options[0].textContent = 'all states';
    const fields = extraOptions(this._schema.jobOptions).map(option => this._optionField(option));
    this._extraFields.replaceChildren(...fields);
    // The lists were empty until now: select the defaults, keeping what was typed.
    this._inputs.backend.value = this._settings.defaultBackend;
    this._inputs.algorithm.value = this._settings.defaultAlgorithm;
    this._showOptionsHint();
  }

  /** A generated field for one job option: its label, its default greyed, its help. */
  private _optionField(option: IJobOption): HTMLElement {
    const attrs = {
      name: option.name,
      class: 'jp-mod-styled',
      title: option.help,
      placeholder: defaultText(option) || 'optional'
    };
    let input: HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement;
    if (option.type === 'kv' || option.type === 'kv_typed') {
      input = h('textarea', { ...attrs, rows: 2, placeholder: 'KEY=VALUE, one a line' });
    } else if (option.choices && option.choices.length) {
      input = h(
        'select',
        attrs,
        h('option', { value: '' }, defaultText(option) || 'default'),
        ...option.choices.map(c => h('option', { value: c }, c))
      );
    } else if (option.type === 'int' || option.type === 'float') {
      input = h('input', {
        ...attrs,
        type: 'number',
        min: option.minimum ?? undefined,
        step: option.type === 'int' ? 1 : 'any'
      });
    } else {
      input = h('input', attrs);
    }
    input.addEventListener('input', () => {
      this._formTouched = true;
    });
    this._extraInputs[option.name] = input;
    return h(
      'label',
      { class: 'jp-Alchemist-field', 'data-option': option.name },
      h('span', {}, option.label || option.name),
      input
    );
  }

  private _fillDefaults(): void {
    this._inputs.workers.value = String(this._settings.defaultWorkers);
    this._inputs.backend.value = this._settings.defaultBackend;
    this._inputs.algorithm.value = this._settings.defaultAlgorithm;
    this._showOptionsHint();
  }

  private _showOptionsHint(): void {
    const hint = optionsHint(this._optionInfo[this._inputs.algorithm.value]);
    this._inputs.algorithmOptions.placeholder = hint.placeholder;
    this._inputs.algorithmOptions.title = hint.title;
  }

  private _build(): void {
    const field = (label: string, input: HTMLElement) =>
      h('label', { class: 'jp-Alchemist-field' }, h('span', {}, label), input);
    const select = (name: string, options: readonly string[]) =>
      h(
        'select',
        { name, class: 'jp-mod-styled' },
        ...options.map(o => h('option', { value: o }, o))
      );
    this._inputs = {
      path: h('input', {
        name: 'path',
        class: 'jp-mod-styled',
        placeholder: 'train.py or notebook.ipynb'
      }),
      workers: h('input', { name: 'workers', class: 'jp-mod-styled', type: 'number', min: 1 }),
      gpusPerWorker: h('input', {
        name: 'gpus_per_worker',
        class: 'jp-mod-styled',
        type: 'number',
        min: 0,
        value: 0
      }),
      algorithm: select('algorithm', []),
      algorithmOptions: h('textarea', {
        name: 'algorithm_options',
        class: 'jp-mod-styled',
        rows: 4,
        placeholder: optionsHint(undefined).placeholder
      }),
      backend: select('backend', []),
      name: h('input', { name: 'name', class: 'jp-mod-styled', placeholder: 'optional' }),
      env: h('textarea', {
        name: 'env',
        class: 'jp-mod-styled',
        rows: 2,
        placeholder: 'KEY=VALUE, one a line'
      })
    };
    this._inputs.algorithm.addEventListener('change', () => this._showOptionsHint());
    this._fillDefaults();
    for (const input of Object.values(this._inputs)) {
      input.addEventListener('input', () => {
        this._formTouched = true;
      });
    }
    const dryButton = h('button', { class: 'jp-Button jp-mod-styled', type: 'button' }, 'Dry run');
    dryButton.addEventListener('click', () => void this.showDryRun());
    this._submitButton = h(
      'button',
      { class: 'jp-Button jp-mod-styled jp-mod-accept', type: 'submit' },
      'Submit'
    );
    const form = h(
      'form',
      { class: 'jp-Alchemist-form' },
      field('File', this._inputs.path),
      h(
        'div',
        { class: 'jp-Alchemist-row' },
        field('Workers', this._inputs.workers),
        field('GPUs / worker', this._inputs.gpusPerWorker)
      ),
      h(
        'div',
        { class: 'jp-Alchemist-row' },
        field('Algorithm', this._inputs.algorithm),
        field('Backend', this._inputs.backend)
      ),
      field('Algorithm options', this._inputs.algorithmOptions),
      field('Name', this._inputs.name),
      field('Environment', this._inputs.env),
      this._extraFields,
      h('div', { class: 'jp-Alchemist-buttons' }, dryButton, this._submitButton),
      this._formMessage.node,
      this._dryrun
    );
    form.addEventListener('submit', event => {
      event.preventDefault();
      void this.submit();
    });
    this._launch = h('details', { class: 'jp-Alchemist-launch', open: true });
    this._launch.append(h('summary', {}, 'Launch a job'), form);

    this._stateFilter = select('state', ['']);
    this._stateFilter.options[0].textContent = 'all states';
    this._stateFilter.addEventListener('change', () => this._renderJobs());
    const jobsHeader = h(
      'div',
      { class: 'jp-Alchemist-jobsHeader' },
      h('h3', {}, 'Jobs'),
      this._stateFilter
    );
    // Hidden until the first listing shows a sweep; the open sweep's trials go below its row.
    this._sweepsSection.style.display = 'none';
    this._sweepsSection.append(
      h('summary', {}, 'Sweeps ', this._sweepsCount),
      this._sweepMessage.node,
      this._sweepList
    );
    this._sweepCancel.addEventListener('click', () => {
      if (this._sweep) {
        void this.cancelSweep(this._sweep.id);
      }
    });
    this._sweepDetail.append(
      h('div', { class: 'jp-Alchemist-sweepSpec' }, this._sweepSpec, this._sweepCancel),
      this._sweepReason,
      this._sweepTrials
    );
    this.node.append(
      h('h2', { class: 'jp-Alchemist-title' }, 'Alchemist'),
      this._launch,
      this._sweepsSection,
      jobsHeader,
      this._listMessage.node,
      this._list,
      this._olderButton,
      this._pool
    );
    this._olderButton.addEventListener('click', () => void this.loadOlder());
    // Elapsed times of running jobs tick between polls (text only: rows keep focus).
    this._clock = window.setInterval(() => {
      if (this.isVisible) {
        this._tickElapsed();
      }
    }, 1000);
  }

  private _tickElapsed(): void {
    const now = Date.now() / 1000;
    for (const job of this._jobs) {
      if (isTerminal(job.state)) {
        continue;
      }
      const row = this._list.querySelector(`[data-job-id="${CSS.escape(job.id)}"]`);
      const cell = row?.querySelector('.jp-Alchemist-elapsed');
      if (cell) {
        cell.textContent = formatElapsed(elapsedSeconds(job, now));
      }
    }
  }

  private _renderJobs(): void {
    const now = Date.now() / 1000;
    const shown = mergePages(this._jobs, this._older);
    const jobs = filterAndSort(shown, this._stateFilter.value);
    // Not `hidden`: .jp-Button's own display rule would show it anyway.
    this._olderButton.style.display = this._next ? '' : 'none';
    const rows = jobs.map(job => {
      const row = h(
        'li',
        {
          class: 'jp-Alchemist-job',
          'data-job-id': job.id,
          'data-state': job.state,
          title: job.reason ? `${job.id}: ${job.reason}` : job.id,
          tabindex: 0
        },
        h('span', { class: 'jp-Alchemist-jobName' }, job.name),
        h('span', { class: `jp-Alchemist-state jp-Alchemist-state-${job.state}` }, job.state),
        h('span', { class: 'jp-Alchemist-elapsed' }, formatElapsed(elapsedSeconds(job, now))),
        h('span', { class: 'jp-Alchemist-metric' }, describeLatest(job.latest))
      );
      const open = () => this._host.openJob(job.id);
      row.addEventListener('click', open);
      row.addEventListener('keydown', event => {
        if (event.key === 'Enter') {
          open();
        }
      });
      return row;
    });
    if (rows.length === 0) {
      rows.push(
        h(
          'li',
          { class: 'jp-Alchemist-empty' },
          shown.length ? 'No job in this state.' : 'No jobs yet.'
        )
      );
    }
    this._list.replaceChildren(...rows);
  }

  /**
   * The sweeps, newest first (as listed), the open one's trials below its row. Rebuilt
   * only when what they show changed, so a row stays put under the pointer between polls.
   */
  private _renderSweeps(): void {
    const sweeps = this._sweeps;
    const shown = sweeps.length > 0 || this._sweepMessage.node.textContent !== '';
    this._sweepsSection.style.display = shown ? '' : 'none';
    const running = sweeps.filter(s => isSweepRunning(s.state)).length;
    this._sweepsCount.textContent = sweeps.length
      ? `(${sweeps.length}${running ? `, ${running} running` : ''})`
      : '';
    const drawn = JSON.stringify([this._openSweep, sweeps]);
    if (drawn === this._sweepsDrawn) {
      return;
    }
    this._sweepsDrawn = drawn;
    const rows: HTMLElement[] = [];
    for (const sweep of sweeps) {
      const open = sweep.id === this._openSweep;
      const row = h(
        'li',
        {
          class: 'jp-Alchemist-sweep',
          'data-sweep-id': sweep.id,
          'data-state': sweep.state,
          title: sweep.reason ? `${sweep.id}: ${sweep.reason}` : sweep.id,
          'aria-expanded': open ? 'true' : 'false',
          tabindex: 0
        },
        h('span', { class: 'jp-Alchemist-sweepName' }, sweep.name),
        h('span', { class: `jp-Alchemist-state jp-Alchemist-state-${sweep.state}` }, sweep.state),
        h('span', { class: 'jp-Alchemist-sweepBest' }, describeBest(sweep.best, sweep.objective)),
        h('span', { class: 'jp-Alchemist-sweepProgress' }, sweepProgress(sweep))
      );
      const toggle = () => this._toggleSweep(sweep);
      row.addEventListener('click', toggle);
      row.addEventListener('keydown', event => {
        if (event.key === 'Enter') {
          toggle();
        }
      });
      rows.push(row);
      if (open) {
        rows.push(this._sweepDetail);
      }
    }
    this._sweepList.replaceChildren(...rows);
  }

  /** Open a sweep on its trials (read at once), or close the open one. */
  private _toggleSweep(sweep: ISweepSummary): void {
    if (this._openSweep === sweep.id) {
      this._openSweep = '';
    } else {
      this._openSweep = sweep.id;
      this._sweep = undefined;
      this._sweepCancel.disabled = false;
      this._renderSweepDetail();
      void this._sweepPoll.refresh();
    }
    this._renderSweeps();
  }

  /**
   * The open sweep: what it searches, why it ended, Cancel while it runs, and its trials
   * best first, each with why it stopped (a trial with a job opens that job's view). The
   * table is rebuilt only when a trial changed; the Cancel button is one element, shown
   * while the sweep runs.
   */
  private _renderSweepDetail(): void {
    const sweep: ISweep | undefined = this._sweep;
    const running = sweep !== undefined && isSweepRunning(sweep.state);
    // Not `hidden`: .jp-Button's own display rule would show it anyway.
    this._sweepCancel.style.display = running ? '' : 'none';
    if (!running) {
      this._sweepCancel.disabled = false;
    }
    this._sweepSpec.textContent = sweep ? describeSweepSpec(sweep) : '';
    this._sweepReason.textContent = sweep?.reason ?? '';
    const trials = sweep ? describeTrials(sweep) : undefined;
    const drawn = JSON.stringify([sweep?.id, sweep?.spec.objective, trials]);
    if (drawn === this._trialsDrawn) {
      return;
    }
    this._trialsDrawn = drawn;
    if (!sweep || !trials) {
      this._sweepTrials.replaceChildren(h('p', { class: 'jp-Alchemist-empty' }, 'Loading…'));
      return;
    }
    if (trials.length === 0) {
      this._sweepTrials.replaceChildren(h('p', { class: 'jp-Alchemist-empty' }, 'No trials yet.'));
      return;
    }
    // One body per trial: its row, and why it stopped on a line of its own below (a
    // sidebar is too narrow for a sixth column).
    const header = ['#', 'Setting', 'State', 'Step', sweep.spec.objective];
    const body = trials.map(t => {
      const row = h(
        'tbody',
        {
          'data-trial': t.number,
          'data-state': t.state,
          'data-job-id': t.jobId || undefined,
          title: t.jobId ? `open job ${t.jobId}` : undefined,
          tabindex: t.jobId ? 0 : undefined
        },
        h(
          'tr',
          {},
          h('td', {}, String(t.number)),
          h('td', {}, t.setting),
          h(
            'td',
            {},
            h('span', { class: `jp-Alchemist-state jp-Alchemist-state-${t.state}` }, t.state)
          ),
          h('td', {}, t.step),
          h('td', {}, t.value)
        ),
        ...(t.reason
          ? [
              h(
                'tr',
                { class: 'jp-Alchemist-trialReason' },
                h('td', {}),
                h('td', { colspan: header.length - 1 }, t.reason)
              )
            ]
          : [])
      );
      if (t.jobId) {
        const open = () => this._host.openJob(t.jobId);
        row.addEventListener('click', open);
        row.addEventListener('keydown', event => {
          if (event.key === 'Enter') {
            open();
          }
        });
      }
      return row;
    });
    this._sweepTrials.replaceChildren(
      h(
        'table',
        { class: 'jp-Alchemist-trials' },
        h('thead', {}, h('tr', {}, ...header.map(c => h('th', {}, c)))),
        ...body
      )
    );
  }

  private _inputs!: {
    path: HTMLInputElement;
    workers: HTMLInputElement;
    gpusPerWorker: HTMLInputElement;
    algorithm: HTMLSelectElement;
    algorithmOptions: HTMLTextAreaElement;
    backend: HTMLSelectElement;
    name: HTMLInputElement;
    env: HTMLTextAreaElement;
  };
  private _optionInfo: Record<string, IOptionInfo[]> = {};
  private _schema: IFormSchema = { algorithms: [], jobOptions: [] };
  private _extraInputs: Record<string, HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement> =
    {};
  private _extraFields = h('div', { class: 'jp-Alchemist-options' });
  private _launch!: HTMLDetailsElement;
  private _submitButton!: HTMLButtonElement;
  private _stateFilter!: HTMLSelectElement;
  private _formTouched = false;
  private _formMessage = new MessageLine();
  private _listMessage = new MessageLine();
  private _dryrun = h('pre', { class: 'jp-Alchemist-dryrun' });
  private _list = h('ul', { class: 'jp-Alchemist-jobs' });
  private _pool = h('div', { class: 'jp-Alchemist-pool' });
  private _jobs: IJob[] = [];
  /** Older pages the user asked for, and the cursor of the next one (null: no more). */
  private _older: IJob[] = [];
  private _next: string | null = null;
  private _olderButton = h(
    'button',
    {
      class: 'jp-Button jp-mod-styled jp-Alchemist-older',
      type: 'button',
      title: 'Show the next page of older jobs',
      style: 'display: none'
    },
    'Older jobs'
  );
  private _poll: Poll;
  private _clock = 0;
  private _sweepPoll: Poll;
  private _sweeps: ISweepSummary[] = [];
  /** The sweep open on its trials ('' when none), and what was last read of it. */
  private _openSweep = '';
  private _sweep: ISweep | undefined;
  private _sweepsSection = h('details', { class: 'jp-Alchemist-sweepsSection' });
  private _sweepsCount = h('span', { class: 'jp-Alchemist-sweepsCount' });
  private _sweepMessage = new MessageLine();
  private _sweepList = h('ul', { class: 'jp-Alchemist-sweeps' });
  private _sweepDetail = h('li', { class: 'jp-Alchemist-sweepDetail' });
  private _sweepSpec = h('span', { class: 'jp-Alchemist-detail' });
  private _sweepCancel = h(
    'button',
    {
      class: 'jp-Button jp-mod-styled jp-mod-warn',
      type: 'button',
      title: 'Cancel the sweep and its running trials',
      style: 'display: none'
    },
    'Cancel'
  );
  private _sweepReason = h('p', { class: 'jp-Alchemist-sweepReason' });
  private _sweepTrials = h('div', { class: 'jp-Alchemist-sweepTrials' });
  /** What the sweep rows and the open sweep's table were last drawn from. */
  private _sweepsDrawn = '';
  private _trialsDrawn = '';
}

/** One job in the main area: curves, logs, spec and actions. */
export class JobView extends Widget {
  constructor(
    readonly jobId: string,
    private _host: IPanelHost,
    pollInterval: number
  ) {
    super();
    this.id = `alchemist-job-${jobId}`;
    this.addClass('jp-Alchemist-jobView');
    this.title.label = `Job ${jobId}`;
    this.title.closable = true;
    this._build();
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: { interval: pollInterval, backoff: true, max: 60_000 },
      name: `alchemist:job:${jobId}`,
      standby: () => (this.isVisible ? 'when-hidden' : true)
    });
    void this._poll.start();
  }

  /** Fetch the job's state, new metric events and new log lines. */
  async refresh(): Promise<void> {
    try {
      const job = await api.getJob(this.jobId);
      this._job = job;
      this._renderHeader(job);
      if (!this._summaryComplete) {
        // The first view: the whole history downsampled from the summary the job keeps
        // beside its metrics files (a few ms however long it has logged); asked again
        // while the server has not caught up with the newest bytes.
        const summary = await api.metricsSummary(this.jobId);
        this._series.add(summaryEvents(summary));
        this._metricsCursor = summary.cursor;
        this._summaryComplete = summary.complete;
      } else {
        // Then the events logged since, a bounded page at a time (a few pages a poll).
        for (let page = 0; page < 4; page++) {
          const chunk = await api.metrics(this.jobId, this._metricsCursor);
          this._metricsCursor = chunk.cursor;
          this._series.add(chunk.events);
          if (!chunk.more) {
            break;
          }
        }
      }
      if (this._series.metricNames().length) {
        this._noCurves.remove();
        this._charts.update(this._series);
      }
      await this._refreshLogs();
      this._message.clear();
      if (isTerminal(job.state) && !this._finalRead) {
        // One more pass reads whatever the workers wrote just before they exited.
        this._finalRead = true;
        return;
      }
      if (isTerminal(job.state) && this._finalRead) {
        this._poll.stop();
      }
    } catch (error) {
      this._message.error(messageOf(error));
      if (error instanceof ApiError && error.failure.status === 404 && error.failure.json) {
        this._poll.stop(); // the job is gone: polling again will not bring it back
        return;
      }
      throw error;
    }
  }

  /** Ask the server to cancel the job. */
  async cancel(): Promise<void> {
    this._cancelButton.disabled = true;
    try {
      const job = await api.cancel(this.jobId);
      this._renderHeader(job);
      void this._poll.refresh();
    } catch (error) {
      this._message.error(messageOf(error));
      this._cancelButton.disabled = false;
    }
  }

  /**
   * Diagnose the job (`GET /jobs/{id}/diagnosis`: the ranks' stacks, up to 3 s) and
   * show the headline, a line per rank and the grouped stacks under the buttons. While
   * the ranks answer, it says so at once, then shows the server's partial reports
   * (`?partial=1`: who answered, with their lines; who is awaited).
   */
  async diagnose(): Promise<void> {
    this._diagnosing = true;
    this._diagnoseButton.disabled = true;
    this._message.clear();
    this._showCollecting(`asking the ranks for stacks (up to ${DIAGNOSIS_WAIT_S} s)`, []);
    let done = false;
    const report = api.diagnosis(this.jobId).finally(() => {
      done = true;
    });
    void this._followPartial(() => done);
    try {
      const view = describeDiagnosis(await report);
      this._diagnosis.replaceChildren(
        h(
          'p',
          { class: 'jp-Alchemist-diagnosisHeadline', 'data-classification': view.classification },
          h('strong', {}, view.headline),
          ` (${view.classification}) `,
          h(
            'a',
            {
              class: 'jp-Alchemist-diagnosisBundle',
              href: api.diagnosisBundleUrl(this.jobId),
              download: `alchemist-${this.jobId}-debug.tar.gz`,
              title: 'Stacks, flight recorders, log tails and the spec in one .tar.gz'
            },
            'Download debug bundle'
          )
        ),
        h(
          'ul',
          { class: 'jp-Alchemist-diagnosisRanks' },
          ...view.ranks.map(r =>
            h(
              'li',
              { 'data-rank': r.rank },
              h('code', {}, r.text),
              ...(r.code ? [' ', h('code', { class: 'jp-Alchemist-diagnosisCode' }, r.code)] : [])
            )
          )
        ),
        ...view.groups.map(g =>
          h(
            'details',
            { class: 'jp-Alchemist-diagnosisGroup' },
            h('summary', {}, g.title),
            h('pre', {}, g.frames.join('\n'))
          )
        ),
        ...view.notes.map(n => h('p', { class: 'jp-Alchemist-diagnosisNote' }, `note: ${n}`))
      );
      this._message.clear();
    } catch (error) {
      this._diagnosis.replaceChildren(); // no "asking…" left behind
      this._message.error(messageOf(error));
    } finally {
      this._diagnosing = false;
      this._diagnoseButton.disabled = isTerminal(this._job?.state ?? '');
    }
  }

  /** The diagnosis in progress: its headline and the lines of the ranks that answered. */
  private _showCollecting(headline: string, lines: string[]): void {
    this._diagnosis.replaceChildren(
      h('p', { class: 'jp-Alchemist-diagnosisCollecting', role: 'status' }, `${headline}…`),
      ...(lines.length
        ? [
            h(
              'ul',
              { class: 'jp-Alchemist-diagnosisAnswered' },
              ...lines.map(line => h('li', {}, h('code', {}, line)))
            )
          ]
        : [])
    );
  }

  /**
   * Until `finished()`, show the server's partial report of the diagnosis in progress
   * every {@link PARTIAL_POLL_MS} ms. A server without partial reports (or an error)
   * ends this quietly: the final report still comes.
   */
  private async _followPartial(finished: () => boolean): Promise<void> {
    while (!finished()) {
      await new Promise(resolve => setTimeout(resolve, PARTIAL_POLL_MS));
      if (finished()) {
        return;
      }
      let partial;
      try {
        partial = await api.diagnosisPartial(this.jobId);
      } catch {
        return;
      }
      if (finished()) {
        return; // the final report is shown (or about to be): never cover it
      }
      if (partial) {
        const answered = (partial.ranks ?? []).filter(r => r.answered).map(r => r.line);
        this._showCollecting(partial.headline, answered);
      }
    }
  }

  /** Open the job's TensorBoard in a new browser tab. */
  async openTensorBoard(): Promise<void> {
    // Open the tab inside the click (popup blockers), then point it at TensorBoard.
    const tab = window.open('', '_blank');
    this._message.note('Starting TensorBoard…');
    try {
      const { url } = await api.tensorboard(this.jobId);
      if (tab) {
        tab.location.href = url;
      } else {
        window.open(url, '_blank');
      }
      this._message.clear();
    } catch (error) {
      tab?.close();
      this._message.error(messageOf(error));
    }
  }

  protected onAfterShow(): void {
    void this._poll.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this._charts.dispose();
    super.dispose();
  }

  private async _refreshLogs(): Promise<void> {
    const rank = Number(this._rankSelect.value || 0);
    let buffer = this._logs.get(rank);
    if (!buffer) {
      buffer = new LogBuffer();
      this._logs.set(rank, buffer);
    }
    // Read what is waiting, a bounded page at a time, up to a few pages per poll.
    for (let page = 0; page < 5; page++) {
      const chunk = await api.logs(this.jobId, rank, buffer.cursor);
      buffer.append(chunk.lines, chunk.cursor);
      this._renderRanks(chunk.ranks);
      if (!chunk.truncated) {
        break;
      }
    }
    if (Number(this._rankSelect.value || 0) === rank) {
      const atBottom =
        this._logView.scrollTop + this._logView.clientHeight >= this._logView.scrollHeight - 4;
      this._logView.textContent = buffer.text();
      if (atBottom) {
        this._logView.scrollTop = this._logView.scrollHeight;
      }
    }
  }

  private _renderRanks(ranks: number[]): void {
    const known = Array.from(this._rankSelect.options).map(o => Number(o.value));
    const all = Array.from(new Set([...known, ...ranks, 0])).sort((a, b) => a - b);
    if (all.length === known.length) {
      return;
    }
    const current = this._rankSelect.value || '0';
    this._rankSelect.replaceChildren(
      ...all.map(r => h('option', { value: r }, `rank ${r}`))
    );
    this._rankSelect.value = current;
  }

  private _renderHeader(job: IJob): void {
    this.title.label = `${job.name} (${job.id})`;
    this._state.textContent = job.state;
    this._state.className = `jp-Alchemist-state jp-Alchemist-state-${job.state}`;
    this.node.dataset.state = job.state;
    const now = Date.now() / 1000;
    this._detail.textContent =
      `${job.backend} · ${formatElapsed(elapsedSeconds(job, now))}` +
      (job.reason ? ` · ${job.reason}` : '');
    this._stalled.textContent = describeStall(job);
    this._cancelButton.disabled = isTerminal(job.state);
    this._diagnoseButton.disabled = isTerminal(job.state) || this._diagnosing;
    this._spec.textContent = JSON.stringify(job.spec ?? {}, null, 2);
  }

  private _build(): void {
    const button = (label: string, action: () => void, extra = '') => {
      const b = h('button', { class: `jp-Button jp-mod-styled ${extra}`, type: 'button' }, label);
      b.addEventListener('click', action);
      return b;
    };
    this._cancelButton = button('Cancel', () => void this.cancel(), 'jp-mod-warn');
    this._diagnoseButton = button('Diagnose', () => void this.diagnose());
    this._diagnoseButton.title = 'Which rank is stuck, and where: asks every rank for its stack';
    this._rankSelect.addEventListener('change', () => {
      this._logView.textContent = '';
      void this._poll.refresh();
    });
    this._rankSelect.append(h('option', { value: 0 }, 'rank 0'));
    this.node.append(
      h(
        'div',
        { class: 'jp-Alchemist-jobHeader' },
        h('h2', {}, this.jobId),
        this._state,
        this._detail,
        this._stalled
      ),
      h(
        'div',
        { class: 'jp-Alchemist-buttons' },
        this._cancelButton,
        button('TensorBoard', () => void this.openTensorBoard()),
        this._diagnoseButton,
        button('Insert attach cell', () => this._host.insertAttachCell(this.jobId))
      ),
      this._message.node,
      this._diagnosis,
      h('h3', {}, 'Learning curves'),
      this._chartsNode,
      h('h3', {}, 'Logs ', this._rankSelect),
      this._logView,
      h('details', {}, h('summary', {}, 'Spec'), this._spec)
    );
    this._chartsNode.append(this._noCurves);
  }

  private _job: IJob | undefined;
  private _poll: Poll;
  private _finalRead = false;
  private _summaryComplete = false;
  private _metricsCursor: MetricsCursor = '';
  private _series = new MetricSeries();
  private _logs = new Map<number, LogBuffer>();
  private _message = new MessageLine();
  private _state = h('span', { class: 'jp-Alchemist-state' });
  private _detail = h('span', { class: 'jp-Alchemist-detail' });
  private _cancelButton!: HTMLButtonElement;
  private _diagnoseButton!: HTMLButtonElement;
  private _diagnosing = false;
  private _stalled = h('span', {
    class: 'jp-Alchemist-stalled',
    style: 'margin-left: 0.5em; color: var(--jp-warn-color0)'
  });
  private _diagnosis = h('div', { class: 'jp-Alchemist-diagnosis' });
  private _rankSelect = h('select', { class: 'jp-mod-styled', name: 'rank' });
  private _logView = h('pre', { class: 'jp-Alchemist-logs' });
  private _spec = h('pre', { class: 'jp-Alchemist-spec' });
  private _chartsNode = h('div', { class: 'jp-Alchemist-charts' });
  private _noCurves = h('p', { class: 'jp-Alchemist-empty' }, 'No metrics logged yet.');
  private _charts = new CurveCharts(this._chartsNode);

  /** The last state seen (for commands). */
  get job(): IJob | undefined {
    return this._job;
  }
}
