// The example cloud's providerSpec: where its VMs live and what they look like. Every problem is
// reported as InvalidArgument naming the field, so the machine's lastOperation says what to fix.

import path from 'node:path';

import type { MachineClass, ProviderApi } from '../../../lib/driver/index.js';

export interface ExampleSpec {
  /** Absolute path of the directory holding this cloud's VM records. */
  directory: string;
  machineType: string;
  zone: string;
  /** Node capacity the VM's kubelet reports. */
  cpu: string;
  memory: string;
}

export function parseSpec(api: ProviderApi, cls: MachineClass): ExampleSpec {
  const raw = cls.providerSpec as Record<string, unknown> | undefined;
  const bad = (field: string, why: string): Error =>
    new api.MachineError('InvalidArgument', `providerSpec.${field} ${why}`);
  if (raw === undefined || typeof raw !== 'object') throw bad('', 'is missing');
  const str = (field: string, fallback?: string): string => {
    const v = raw[field];
    if (v === undefined && fallback !== undefined) return fallback;
    if (typeof v !== 'string' || v === '') throw bad(field, 'is required (a non-empty string)');
    return v;
  };
  const directory = str('directory');
  if (!path.isAbsolute(directory)) throw bad('directory', 'must be an absolute path');
  return {
    directory,
    machineType: str('machineType'),
    zone: str('zone', 'zone-a'),
    cpu: str('cpu', '2'),
    memory: str('memory', '4Gi'),
  };
}
