import * as fs from 'fs';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';

/** A file the dashboard loads from the learner itself (nothing comes from the internet). */
export interface DashboardAsset {
  contentType: string;
  body: string;
}

/**
 * The chart library, resolved through Node's module resolution rather than a
 * path into node_modules, so hoisting or a different install layout still
 * finds it. Served under these names only: the route is not a file server.
 */
const ASSET_MODULES: Record<string, { module: string; contentType: string }> = {
  'uPlot.iife.min.js': { module: 'uplot/dist/uPlot.iife.min.js', contentType: 'text/javascript; charset=utf-8' },
  'uPlot.min.css': { module: 'uplot/dist/uPlot.min.css', contentType: 'text/css; charset=utf-8' },
};

export const DASHBOARD_ASSET_NAMES = Object.keys(ASSET_MODULES);

const cache = new Map<string, DashboardAsset>();

/** The asset, or undefined for a name that is not one; ENVIRONMENT when the package is missing. */
export function dashboardAsset(name: string): DashboardAsset | undefined {
  if (!Object.prototype.hasOwnProperty.call(ASSET_MODULES, name)) return undefined;
  const hit = cache.get(name);
  if (hit) return hit;
  const spec = ASSET_MODULES[name];
  let body: string;
  try {
    body = fs.readFileSync(require.resolve(spec.module), 'utf8');
  } catch (e) {
    throw new SrpoError(ErrorCode.ENVIRONMENT, `dashboard asset ${name}: cannot read ${spec.module} (is the uplot package installed?): ${errorMessage(e)}`, {
      cause: e,
    });
  }
  const asset = { contentType: spec.contentType, body };
  cache.set(name, asset);
  return asset;
}
