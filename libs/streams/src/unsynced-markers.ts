import { randomUUID } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';

/*
 * Markers of a local copy's unflushed writes (see local-task-state.ts): local commits are not
 * fsynced one by one, so each open copy holds `unsynced-<pid>-<token>`, durable before its
 * first unflushed write and naming the boot it was written in. A marker of another boot means
 * an operating-system crash may have torn the file.
 */

const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

/** The kernel's id of this boot, or undefined where there is none to read. */
export function currentBootId(): string | undefined {
  try {
    const id = fs.readFileSync(BOOT_ID_FILE, 'utf8').trim();
    return id.length > 0 ? id : undefined;
  } catch {
    return undefined;
  }
}

const UNSYNCED_PREFIX = 'unsynced-';

/**
 * Whether the copy in `dir` may hold writes that a machine restart tore: a marker of another
 * boot (or any marker when this boot's id is unknown). Markers of this boot whose process is
 * gone (it crashed) are cleared after flushing the file, since their writes sit in this
 * boot's page cache.
 */
export function unsyncedFromAnotherBoot(dir: string, boot: string | undefined): boolean {
  const markers = fs.readdirSync(dir).filter((f) => f.startsWith(UNSYNCED_PREFIX));
  let flushed = false;
  for (const name of markers) {
    const file = path.join(dir, name);
    let written: string;
    try {
      written = fs.readFileSync(file, 'utf8').trim();
    } catch {
      continue;
    }
    if (boot === undefined || written !== boot) return true;
    const pid = Number(name.slice(UNSYNCED_PREFIX.length).split('-')[0]);
    if (Number.isInteger(pid) && pid > 0 && !processAlive(pid)) {
      if (!flushed) flushFile(path.join(dir, 'data.mdb'));
      flushed = true;
      fs.rmSync(file, { force: true });
    }
  }
  return false;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, under another user.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Writes this opening's marker and makes it durable (file and directory entry). */
export function writeUnsyncedMarker(dir: string, boot: string): string {
  const file = path.join(dir, `${UNSYNCED_PREFIX}${process.pid}-${randomUUID().slice(0, 8)}`);
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, boot);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  flushFile(dir);
  return file;
}

/** fsync of a file or directory by path (any descriptor of the inode flushes its dirty pages). */
export function flushFile(file: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'r');
    fs.fsyncSync(fd);
  } catch {
    // A missing file has nothing to flush.
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}
