/**
 * Calls to the Alchemist REST API of the Jupyter server (alchemist/server/handlers.py).
 *
 * URLs are built from the server connection's base URL, so the panel works behind
 * JupyterHub (`/user/<name>/`) as well as on a plain server; ServerConnection adds the
 * token and XSRF headers.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  IDiagnosis,
  IFailure,
  IJob,
  IMetricEvent,
  IMetricsSummary,
  IServerInfo,
  ISubmitBody,
  ISweep,
  ISweepSummary,
  explainFailure
} from './model';

/** Root of the versioned REST API, relative to the server's base URL. */
export const API_ROOT = 'alchemist/api/v1';

/** A failed request, carrying the one-line message to show. */
export class ApiError extends Error {
  constructor(
    readonly failure: IFailure,
    readonly url: string
  ) {
    super(explainFailure(failure));
    this.name = 'ApiError';
  }
}

/**
 * Call `endpoint` (relative to {@link API_ROOT}) and return the parsed JSON reply.
 *
 * @throws ApiError with a one-line explanation on any failure (no answer, an error
 *   status, or a reply that is not JSON).
 */
export async function requestAPI<T>(
  endpoint: string,
  init: RequestInit = {},
  query: Record<string, string | number | undefined> = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const search = Object.entries(query)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
    .join('&');
  const url = URLExt.join(settings.baseUrl, API_ROOT, endpoint) + (search ? `?${search}` : '');
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ApiError({ status: 0, text: String(error) }, url);
  }
  const text = await response.text();
  let json: unknown = undefined;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = undefined;
  }
  if (!response.ok || json === undefined) {
    throw new ApiError({ status: response.ok ? 404 : response.status, json, text }, url);
  }
  return json as T;
}

function jsonInit(method: string, body?: unknown): RequestInit {
  return body === undefined
    ? { method }
    : { method, body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } };
}

/** A partial diagnosis report, while the ranks answer (`classification` `collecting`). */
export interface IPartialDiagnosis extends IDiagnosis {
  collecting: boolean;
  /** The ranks still awaited. */
  waiting_for: number[];
}

/** `POST /jobs/dryrun` and `GET /jobs/{id}/dryrun` reply. */
export interface IDryRun {
  backend: string;
  text: string;
  request?: Record<string, unknown>;
  manifest?: unknown;
}

export interface ILogChunk {
  rank: number;
  lines: string[];
  cursor: number;
  truncated: boolean;
  ranks: number[];
}

/**
 * Where a metrics read stopped: an opaque string (the offset reached in each rank's
 * file). Pass back the one a reply gave; `''` reads from the start.
 */
export type MetricsCursor = string;

export interface IMetricsChunk {
  events: IMetricEvent[];
  cursor: MetricsCursor;
  /** More events were already waiting beyond this page. */
  more: boolean;
}

/** The user's warm pool of local ranks, as `GET /alchemist/api/v1/pool` says. */
export interface IPoolStatus {
  running: boolean;
  /** One line for people: `warm pool: idle 4 min (ends in 6 min), 3 jobs served`. */
  text: string;
  status?: string;
  ranks?: number;
  jobs?: string[];
}

export const api = {
  info(): Promise<IServerInfo> {
    return requestAPI('');
  },
  /**
   * A page of the user's jobs, newest first; `next` is the `before` of the next (older)
   * page, null on the last.
   */
  listJobs(state = '', before = ''): Promise<{ jobs: IJob[]; next: string | null }> {
    return requestAPI('jobs', {}, { state, before });
  },
  getJob(id: string): Promise<IJob> {
    return requestAPI(`jobs/${encodeURIComponent(id)}`);
  },
  submit(body: ISubmitBody): Promise<IJob> {
    return requestAPI('jobs', jsonInit('POST', body));
  },
  previewDryRun(body: ISubmitBody): Promise<IDryRun> {
    return requestAPI('jobs/dryrun', jsonInit('POST', body));
  },
  jobDryRun(id: string): Promise<IDryRun> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/dryrun`);
  },
  cancel(id: string): Promise<IJob> {
    return requestAPI(`jobs/${encodeURIComponent(id)}`, jsonInit('DELETE'));
  },
  metrics(id: string, since: MetricsCursor): Promise<IMetricsChunk> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/metrics`, {}, { since });
  },
  /** The whole history downsampled, from the job's cached summary (a constant-time first view). */
  metricsSummary(id: string): Promise<IMetricsSummary> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/metrics`, {}, { view: 'summary' });
  },
  logs(id: string, rank: number, since: number): Promise<ILogChunk> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/logs`, {}, { rank, since });
  },
  diagnosis(id: string): Promise<IDiagnosis> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/diagnosis`);
  },
  /**
   * The latest partial report of a diagnosis of the job in progress on the server
   * (`GET jobs/<id>/diagnosis?partial=1`: who answered, who is awaited), or null when
   * none is in progress (204). Asks the ranks nothing. A server without partial
   * reports answers 400 (an ApiError).
   */
  async diagnosisPartial(id: string): Promise<IPartialDiagnosis | null> {
    const found = await requestAPI<Partial<IPartialDiagnosis>>(
      `jobs/${encodeURIComponent(id)}/diagnosis`,
      {},
      { partial: 1 }
    );
    return found.collecting && typeof found.headline === 'string'
      ? (found as IPartialDiagnosis)
      : null;
  },
  /**
   * The URL of the job's debug bundle (`GET jobs/<id>/diagnosis/bundle`, a `.tar.gz`
   * made when it is fetched), for a download link: the browser sends the server's
   * login cookie with it.
   */
  diagnosisBundleUrl(id: string): string {
    const settings = ServerConnection.makeSettings();
    const path = `jobs/${encodeURIComponent(id)}/diagnosis/bundle`;
    return URLExt.join(settings.baseUrl, API_ROOT, path);
  },
  pool(): Promise<IPoolStatus> {
    return requestAPI('pool');
  },
  stopPool(): Promise<IPoolStatus> {
    return requestAPI('pool', jsonInit('DELETE'));
  },
  tensorboard(id: string): Promise<{ url: string }> {
    return requestAPI(`jobs/${encodeURIComponent(id)}/tensorboard`, jsonInit('POST', {}));
  },
  /** The user's sweeps, newest first; `skipped`: those that could not be read, with why. */
  listSweeps(): Promise<{ sweeps: ISweepSummary[]; skipped: { id: string; reason: string }[] }> {
    return requestAPI('sweeps');
  },
  /** One sweep: its spec, every trial and the best. */
  getSweep(id: string): Promise<ISweep> {
    return requestAPI(`sweeps/${encodeURIComponent(id)}`);
  },
  /** Cancel the sweep and its running trials (idempotent); replies with the sweep. */
  cancelSweep(id: string): Promise<ISweep> {
    return requestAPI(`sweeps/${encodeURIComponent(id)}`, jsonInit('DELETE'));
  }
};
