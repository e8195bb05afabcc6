/**
 * The Alchemist JupyterLab extension: a left-sidebar panel to launch and watch jobs,
 * a job view in the main area, and command-palette entries for the same actions.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  showErrorMessage
} from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { ApiError, api } from './api';
import { AlchemistPanel, DEFAULT_SETTINGS, IPanelSettings, JobView } from './panel';

const PLUGIN_ID = 'alchemist-jupyterlab:plugin';

namespace CommandIDs {
  export const showPanel = 'alchemist:show-panel';
  export const runFile = 'alchemist:run-file';
  export const submitForm = 'alchemist:submit';
  export const refresh = 'alchemist:refresh';
  export const openJob = 'alchemist:open-job';
  export const cancelJob = 'alchemist:cancel-job';
  export const insertAttach = 'alchemist:insert-attach-cell';
}

// A flask: the panel's tab icon.
const alchemistIcon = new LabIcon({
  name: 'alchemist:flask',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16">' +
    '<path class="jp-icon3" fill="#616161" d="M9 2h6v2h-1v5.2l5.6 9.4A2 2 0 0 1 17.9 22H6.1' +
    'a2 2 0 0 1-1.7-3.4L10 9.2V4H9V2zm3 9.3L8.6 17h6.8L12 11.3z"/></svg>'
});

async function askJobId(title: string): Promise<string | undefined> {
  const result = await InputDialog.getText({ title, label: 'Job id' });
  const id = result.value?.trim();
  return result.button.accept && id ? id : undefined;
}

function readSettings(settings: ISettingRegistry.ISettings | undefined): IPanelSettings {
  if (!settings) {
    return DEFAULT_SETTINGS;
  }
  const get = <T>(key: keyof IPanelSettings): T => settings.get(key).composite as T;
  return {
    pollInterval: Math.max(250, get<number>('pollInterval') ?? DEFAULT_SETTINGS.pollInterval),
    defaultBackend: get<string>('defaultBackend') ?? DEFAULT_SETTINGS.defaultBackend,
    defaultWorkers: get<number>('defaultWorkers') ?? DEFAULT_SETTINGS.defaultWorkers,
    defaultAlgorithm: get<string>('defaultAlgorithm') ?? DEFAULT_SETTINGS.defaultAlgorithm
  };
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Launch and watch Alchemist distributed training jobs.',
  autoStart: true,
  requires: [ILabShell],
  optional: [
    ICommandPalette,
    ILayoutRestorer,
    INotebookTracker,
    ISettingRegistry,
    IDefaultFileBrowser
  ],
  activate: async (
    app: JupyterFrontEnd,
    labShell: ILabShell,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    registry: ISettingRegistry | null,
    fileBrowser: IDefaultFileBrowser | null
  ) => {
    let settingsObject: ISettingRegistry.ISettings | undefined;
    if (registry) {
      try {
        settingsObject = await registry.load(PLUGIN_ID);
      } catch (error) {
        console.warn('Alchemist: settings could not be loaded, using defaults', error);
      }
    }
    let settings = readSettings(settingsObject);
    const views = new Map<string, MainAreaWidget<JobView>>();

    const insertAttachCell = (id: string): void => {
      const current = notebooks?.currentWidget;
      if (!current) {
        void showErrorMessage(
          'Alchemist',
          'Open a notebook first: the attach cell goes into the current notebook.'
        );
        return;
      }
      const notebook = current.content;
      NotebookActions.insertBelow(notebook);
      const cell = notebook.activeCell;
      if (cell) {
        cell.model.sharedModel.setSource(`%alchemist_attach ${id}`);
      }
      labShell.activateById(current.id);
    };

    const openJob = (id: string): void => {
      let view = views.get(id);
      if (!view || view.isDisposed) {
        const content = new JobView(id, host, settings.pollInterval);
        view = new MainAreaWidget({ content });
        view.id = `alchemist-job-view-${id}`;
        view.title.label = `Job ${id}`;
        view.title.icon = alchemistIcon;
        view.title.closable = true;
        content.title.changed.connect(() => {
          view!.title.label = content.title.label;
        });
        views.set(id, view);
        app.shell.add(view, 'main');
      }
      app.shell.activateById(view.id);
    };

    const host = { openJob, insertAttachCell };
    const panel = new AlchemistPanel(host, settings);
    panel.title.icon = alchemistIcon;
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, 'alchemist-panel');
    settingsObject?.changed.connect(() => {
      settings = readSettings(settingsObject);
      panel.updateSettings(settings);
    });

    const { commands } = app;
    commands.addCommand(CommandIDs.showPanel, {
      label: 'Alchemist: Show Jobs Panel',
      execute: () => labShell.activateById(panel.id)
    });
    commands.addCommand(CommandIDs.runFile, {
      label: 'Run as Alchemist Job…',
      icon: alchemistIcon,
      isVisible: () => {
        const item = fileBrowser?.selectedItems().next();
        return !item || item.done ? true : /\.(py|ipynb)$/.test(item.value.path);
      },
      execute: args => {
        let path = args.path as string | undefined;
        if (!path) {
          const item = fileBrowser?.selectedItems().next();
          path = item && !item.done ? item.value.path : undefined;
        }
        if (!path) {
          // From the palette: the document in the main area, if it is a file.
          const widget = app.shell.currentWidget as { context?: { path?: string } } | null;
          path = widget?.context?.path;
        }
        labShell.activateById(panel.id);
        if (path) {
          panel.setPath(path);
        }
      }
    });
    commands.addCommand(CommandIDs.submitForm, {
      label: 'Alchemist: Submit the Launch Form',
      execute: () => {
        labShell.activateById(panel.id);
        return panel.submit();
      }
    });
    commands.addCommand(CommandIDs.refresh, {
      label: 'Alchemist: Refresh Jobs',
      execute: () => panel.refresh().catch(() => undefined)
    });
    commands.addCommand(CommandIDs.openJob, {
      label: 'Alchemist: Open Job…',
      execute: async args => {
        const id = (args.id as string) || (await askJobId('Open Alchemist job'));
        if (id) {
          openJob(id);
        }
      }
    });
    commands.addCommand(CommandIDs.cancelJob, {
      label: 'Alchemist: Cancel Job…',
      execute: async args => {
        const current = app.shell.currentWidget;
        const fromView =
          current instanceof MainAreaWidget && current.content instanceof JobView
            ? current.content.jobId
            : undefined;
        const id = (args.id as string) || fromView || (await askJobId('Cancel Alchemist job'));
        if (!id) {
          return;
        }
        try {
          await api.cancel(id);
          await panel.refresh();
        } catch (error) {
          void showErrorMessage(
            'Alchemist',
            error instanceof ApiError ? error.message : String(error)
          );
        }
      }
    });
    commands.addCommand(CommandIDs.insertAttach, {
      label: 'Alchemist: Insert Attach Cell…',
      execute: async args => {
        const id = (args.id as string) || (await askJobId('Attach to Alchemist job'));
        if (id) {
          insertAttachCell(id);
        }
      }
    });
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: 'Alchemist' });
      }
    }
  }
};

export default plugin;
