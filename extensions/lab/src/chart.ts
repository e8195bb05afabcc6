/**
 * Learning curves drawn with uPlot: one chart per metric, one line per rank, step on
 * the x axis. Charts are created when a metric first appears and updated in place.
 */
import uPlot from 'uplot';

import { MetricSeries } from './model';

const RANK_COLORS = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf'
];

/** A grid of uPlot charts kept in sync with a {@link MetricSeries}. */
export class CurveCharts {
  constructor(readonly node: HTMLElement) {}

  /** Redraw every metric of `series`; creates a chart for each new metric. */
  update(series: MetricSeries): void {
    const width = Math.max(240, Math.min(520, this.node.clientWidth - 16 || 420));
    const ranks = series.ranks();
    for (const metric of series.metricNames()) {
      const data = series.aligned(metric) as uPlot.AlignedData;
      const existing = this._charts.get(metric);
      if (existing && existing.ranks === ranks.length) {
        existing.plot.setData(data);
        existing.box.dataset.points = String(data[0].length);
        continue;
      }
      existing?.plot.destroy();
      existing?.box.remove();
      const box = document.createElement('div');
      box.className = 'jp-Alchemist-chart';
      box.dataset.metric = metric;
      this.node.appendChild(box);
      const plot = new uPlot(
        {
          title: metric,
          width,
          height: 200,
          scales: { x: { time: false } },
          axes: [{ label: 'step' }, {}],
          series: [
            { label: 'step' },
            ...ranks.map((rank, i) => ({
              label: `rank ${rank}`,
              stroke: RANK_COLORS[i % RANK_COLORS.length],
              width: 1.5,
              spanGaps: true
            }))
          ]
        },
        data,
        box
      );
      // How many steps the chart holds: a hook for tests and for the curious.
      box.dataset.points = String(data[0].length);
      this._charts.set(metric, { plot, box, ranks: ranks.length });
    }
  }

  dispose(): void {
    for (const { plot } of this._charts.values()) {
      plot.destroy();
    }
    this._charts.clear();
  }

  private _charts = new Map<string, { plot: uPlot; box: HTMLElement; ranks: number }>();
}
