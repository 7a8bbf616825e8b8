// Validation of machine.sapcloud.io objects as pure functions. It covers MCM's own controller-side
// rules plus everything our CRDs enforce at admission, with the same wording, so a controller can
// explain why it skips an object that reached the cluster without passing today's CRD (written
// before the CRD was updated, or while validation was ratcheted).

import { OrchestrationType, StrategyType, TaintEffect } from './constants.js';
import { IntOrStringError, scaledValue } from './intstr.js';
import { nodeTemplateResources } from './nodetemplate.js';
import { replicasOf } from './replicas.js';
import type {
  ClassSpec,
  IntOrString,
  LabelSelector,
  MachineClass,
  Machine,
  MachineDeployment,
  MachineDeploymentSpec,
  MachineSet,
  MachineSpec,
  MachineTemplateSpec,
  NodeTemplateSpec,
  ResourceList,
  UpdateConfiguration,
} from './types.js';

export interface FieldError {
  /** JSON path of the offending field, e.g. `spec.strategy.rollingUpdate.maxSurge`. */
  field: string;
  message: string;
}

// ---------------------------------------------------------------------------------------------
// Patterns and messages shared with the CRD schemas (lib/api/crds.ts). Changing one changes what
// users see in kubectl's error output.
// ---------------------------------------------------------------------------------------------

/** Go time.ParseDuration syntax: "0" or one or more <number><unit> groups, optionally signed. */
export const DURATION_PATTERN = '^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$';
export const DURATION_MAX_LENGTH = 64;
export const DURATION_MESSAGE =
  'must be a duration such as "90s", "10m" or "1h30m" (units ns, us, ms, s, m, h)';

export { QUANTITY_MESSAGE, QUANTITY_PATTERN } from './quantity.js';

/** The only string form an int-or-percent may take at admission. */
export const PERCENT_PATTERN = '^[0-9]+%$';
export const INT_OR_PERCENT_MAX_LENGTH = 16;
export const INT_OR_PERCENT_MESSAGE =
  'must be a non-negative integer (e.g. 1) or a percentage written as digits followed by "%" (e.g. "25%")';

export const BOTH_ZERO_MESSAGE =
  'maxSurge and maxUnavailable must not both be zero: the rollout could never replace a machine';

/** Label values longer than this are rejected by Kubernetes on real objects (Nodes, Machines). */
export const LABEL_VALUE_MAX_LENGTH = 63;

/** Upper bound on selector.matchLabels entries; the CRD needs one to bound CEL cost. */
export const SELECTOR_MATCH_LABELS_MAX = 1024;

export const SELECTOR_MISMATCH_PREFIX = 'spec.selector does not match spec.template.metadata.labels';

export const SELECTOR_OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;
export const SELECTOR_VALUES_REQUIRED_MESSAGE = 'values must be non-empty when operator is In or NotIn';
export const SELECTOR_VALUES_FORBIDDEN_MESSAGE =
  'values must be empty when operator is Exists or DoesNotExist';

export const STRATEGY_TYPES: readonly StrategyType[] = [
  StrategyType.Recreate,
  StrategyType.RollingUpdate,
  StrategyType.InPlaceUpdate,
];
export const ORCHESTRATION_TYPES: readonly OrchestrationType[] = [
  OrchestrationType.Auto,
  OrchestrationType.Manual,
];
export const TAINT_EFFECTS: readonly TaintEffect[] = [
  TaintEffect.NoSchedule,
  TaintEffect.PreferNoSchedule,
  TaintEffect.NoExecute,
];

export const ROLLING_UPDATE_REQUIRED_MESSAGE =
  'spec.strategy.rollingUpdate is required when spec.strategy.type is RollingUpdate';
export const IN_PLACE_UPDATE_REQUIRED_MESSAGE =
  'spec.strategy.inPlaceUpdate is required when spec.strategy.type is InPlaceUpdate';

/** Message for a missing maxSurge/maxUnavailable in the block the strategy type selects. */
export function updateFieldRequiredMessage(block: 'rollingUpdate' | 'inPlaceUpdate', name: string): string {
  const type = block === 'rollingUpdate' ? StrategyType.RollingUpdate : StrategyType.InPlaceUpdate;
  return `spec.strategy.${block}.${name} is required when spec.strategy.type is ${type}`;
}

export const ORCHESTRATION_TYPE_REQUIRED_MESSAGE =
  'spec.strategy.inPlaceUpdate.orchestrationType is required when spec.strategy.type is InPlaceUpdate (Auto or Manual)';

export const REQUIRED_MESSAGE = 'Required value';
export const NON_NEGATIVE_MESSAGE = 'must be greater than or equal to 0';

const INT32_MAX = 2_147_483_647;
const INT32_MIN = -2_147_483_648;

const durationRegExp = new RegExp(DURATION_PATTERN);
const percentRegExp = new RegExp(PERCENT_PATTERN);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

function required(field: string, message = REQUIRED_MESSAGE): FieldError {
  return { field, message };
}

function unsupported(field: string, value: string, supported: readonly string[]): FieldError {
  const list = supported.map((s) => `"${s}"`).join(', ');
  return { field, message: `Unsupported value: "${value}": supported values: ${list}` };
}

function isBlank(value: string | undefined): boolean {
  return value === undefined || value === '';
}

function nonNegative(value: number | undefined, field: string): FieldError[] {
  return value !== undefined && value < 0 ? [{ field, message: NON_NEGATIVE_MESSAGE }] : [];
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Template labels that the selector's matchLabels demands but the template lacks, as `k=v`. */
export function unmatchedSelectorLabels(
  selector: LabelSelector | undefined,
  templateLabels: Record<string, string> | undefined,
): string[] {
  const wanted = selector?.matchLabels ?? {};
  const have = templateLabels ?? {};
  return Object.keys(wanted)
    .sort()
    .filter((key) => have[key] !== wanted[key])
    .map((key) => `${key}=${wanted[key] ?? ''}`);
}

export function selectorMismatchMessage(unmatched: readonly string[]): string {
  return `${SELECTOR_MISMATCH_PREFIX}: the template lacks ${unmatched.join(', ')}`;
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

function validateClassReference(classSpec: ClassSpec | undefined, path: string): FieldError[] {
  if (classSpec === undefined) return [required(path)];
  const errs: FieldError[] = [];
  if (isBlank(classSpec.kind))
    errs.push(required(`${path}.kind`, 'kind of the referenced class is required'));
  if (isBlank(classSpec.name))
    errs.push(required(`${path}.name`, 'name of the referenced class is required'));
  return errs;
}

const DURATION_FIELDS = [
  'drainTimeout',
  'healthTimeout',
  'creationTimeout',
  'inPlaceUpdateTimeout',
  'machinePreserveTimeout',
] as const;

export function isGoDuration(value: string): boolean {
  return value.length <= DURATION_MAX_LENGTH && durationRegExp.test(value);
}

function validateLabelValues(labels: Record<string, string> | undefined, path: string): FieldError[] {
  return Object.entries(labels ?? {})
    .filter(([, value]) => value.length > LABEL_VALUE_MAX_LENGTH)
    .map(([key]) => ({
      field: `${path}.${key}`,
      message: `must be no more than ${LABEL_VALUE_MAX_LENGTH} characters (a label value)`,
    }));
}

function validateNodeTemplateSpec(nodeTemplate: NodeTemplateSpec | undefined, path: string): FieldError[] {
  if (nodeTemplate === undefined) return [];
  const errs = validateLabelValues(nodeTemplate.metadata?.labels, `${path}.metadata.labels`);
  (nodeTemplate.spec?.taints ?? []).forEach((taint, i) => {
    const taintPath = `${path}.spec.taints[${i}]`;
    if (isBlank(taint.key)) errs.push(required(`${taintPath}.key`));
    if ((taint.effect as string | undefined) === undefined) errs.push(required(`${taintPath}.effect`));
    else if (!TAINT_EFFECTS.includes(taint.effect)) {
      errs.push(unsupported(`${taintPath}.effect`, taint.effect, TAINT_EFFECTS));
    }
  });
  return errs;
}

function validateMachineSpec(spec: MachineSpec | undefined, path: string): FieldError[] {
  if (spec === undefined) return [required(path)];
  const errs = validateClassReference(spec.class, `${path}.class`);
  for (const name of DURATION_FIELDS) {
    const value = spec[name];
    if (value !== undefined && !isGoDuration(value))
      errs.push({ field: `${path}.${name}`, message: DURATION_MESSAGE });
  }
  errs.push(...validateNodeTemplateSpec(spec.nodeTemplate, `${path}.nodeTemplate`));
  return errs;
}

function validateSelector(selector: LabelSelector | undefined, path: string): FieldError[] {
  if (selector === undefined) return [required(path)];
  const errs = validateLabelValues(selector.matchLabels, `${path}.matchLabels`);
  if (Object.keys(selector.matchLabels ?? {}).length > SELECTOR_MATCH_LABELS_MAX) {
    errs.push({
      field: `${path}.matchLabels`,
      message: `must have at most ${SELECTOR_MATCH_LABELS_MAX} items`,
    });
  }
  (selector.matchExpressions ?? []).forEach((expr, i) => {
    const exprPath = `${path}.matchExpressions[${i}]`;
    if (isBlank(expr.key)) errs.push(required(`${exprPath}.key`));
    const operator = expr.operator as string | undefined;
    const hasValues = (expr.values ?? []).length > 0;
    if (operator === undefined) errs.push(required(`${exprPath}.operator`));
    else if (operator === 'In' || operator === 'NotIn') {
      if (!hasValues) errs.push({ field: `${exprPath}.values`, message: SELECTOR_VALUES_REQUIRED_MESSAGE });
    } else if (operator === 'Exists' || operator === 'DoesNotExist') {
      if (hasValues) errs.push({ field: `${exprPath}.values`, message: SELECTOR_VALUES_FORBIDDEN_MESSAGE });
    } else {
      errs.push(unsupported(`${exprPath}.operator`, operator, SELECTOR_OPERATORS));
    }
  });
  return errs;
}

/** Checks shared by the templates of MachineSets and MachineDeployments. */
function validateTemplated(
  selector: LabelSelector | undefined,
  template: MachineTemplateSpec | undefined,
): FieldError[] {
  const errs = validateSelector(selector, 'spec.selector');
  const unmatched = unmatchedSelectorLabels(selector, template?.metadata?.labels);
  if (unmatched.length > 0) {
    errs.push({ field: 'spec.selector.matchLabels', message: selectorMismatchMessage(unmatched) });
  }
  if (template === undefined) return [...errs, required('spec.template')];
  errs.push(...validateLabelValues(template.metadata?.labels, 'spec.template.metadata.labels'));
  errs.push(...validateMachineSpec(template.spec, 'spec.template.spec'));
  return errs;
}

/** Syntax of one int-or-percent field, as the CRD checks it wherever it appears. */
export function validateIntOrPercent(value: IntOrString | undefined, path: string): FieldError[] {
  if (value === undefined) return [];
  const ok =
    typeof value === 'number'
      ? Number.isInteger(value) && value >= 0 && value <= INT32_MAX
      : value.length <= INT_OR_PERCENT_MAX_LENGTH && percentRegExp.test(value);
  return ok ? [] : [{ field: path, message: INT_OR_PERCENT_MESSAGE }];
}

function isZero(value: IntOrString): boolean {
  return typeof value === 'number' ? value === 0 : /^0+%$/.test(value);
}

/** MCM resolves percentages against spec.replicas (rounding up) and needs the result in int32. */
function fitsInt32(value: IntOrString, replicas: number): boolean {
  try {
    const scaled = scaledValue(value, replicas, true);
    return scaled >= INT32_MIN && scaled <= INT32_MAX;
  } catch (err) {
    if (err instanceof IntOrStringError) return false;
    throw err;
  }
}

function validateUpdateConfiguration(
  config: UpdateConfiguration,
  path: string,
  active: { block: 'rollingUpdate' | 'inPlaceUpdate'; replicas: number } | undefined,
): FieldError[] {
  const errs: FieldError[] = [];
  for (const name of ['maxSurge', 'maxUnavailable'] as const) {
    const value = config[name];
    const fieldPath = `${path}.${name}`;
    if (value === undefined) {
      if (active !== undefined)
        errs.push(required(fieldPath, updateFieldRequiredMessage(active.block, name)));
      continue;
    }
    const syntax = validateIntOrPercent(value, fieldPath);
    errs.push(...syntax);
    if (syntax.length === 0 && active !== undefined && !fitsInt32(value, active.replicas)) {
      errs.push({ field: fieldPath, message: `unable to convert ${name} to int32` });
    }
  }
  if (
    config.maxSurge !== undefined &&
    config.maxUnavailable !== undefined &&
    isZero(config.maxSurge) &&
    isZero(config.maxUnavailable)
  ) {
    errs.push({ field: path, message: BOTH_ZERO_MESSAGE });
  }
  return errs;
}

function validateStrategy(spec: MachineDeploymentSpec): FieldError[] {
  const strategy = spec.strategy;
  if (strategy === undefined) return [required('spec.strategy')];
  const replicas = replicasOf({ spec });
  const type = strategy.type as string | undefined;
  const errs: FieldError[] = [];
  if (type === undefined || type === '') errs.push(required('spec.strategy.type'));
  else if (!(STRATEGY_TYPES as readonly string[]).includes(type)) {
    errs.push(unsupported('spec.strategy.type', type, STRATEGY_TYPES));
  }

  const rolling = strategy.rollingUpdate;
  const rollingActive = type === StrategyType.RollingUpdate;
  if (rolling !== undefined) {
    const active = rollingActive ? { block: 'rollingUpdate' as const, replicas } : undefined;
    errs.push(...validateUpdateConfiguration(rolling, 'spec.strategy.rollingUpdate', active));
  } else if (rollingActive) {
    errs.push(required('spec.strategy.rollingUpdate', ROLLING_UPDATE_REQUIRED_MESSAGE));
  }

  const inPlace = strategy.inPlaceUpdate;
  const inPlaceActive = type === StrategyType.InPlaceUpdate;
  if (inPlace !== undefined) {
    const active = inPlaceActive ? { block: 'inPlaceUpdate' as const, replicas } : undefined;
    errs.push(...validateUpdateConfiguration(inPlace, 'spec.strategy.inPlaceUpdate', active));
    const orchestration = inPlace.orchestrationType as string | undefined;
    const orchestrationPath = 'spec.strategy.inPlaceUpdate.orchestrationType';
    if (orchestration === undefined || orchestration === '') {
      if (inPlaceActive) errs.push(required(orchestrationPath, ORCHESTRATION_TYPE_REQUIRED_MESSAGE));
    } else if (!(ORCHESTRATION_TYPES as readonly string[]).includes(orchestration)) {
      errs.push(unsupported(orchestrationPath, orchestration, ORCHESTRATION_TYPES));
    }
  } else if (inPlaceActive) {
    errs.push(required('spec.strategy.inPlaceUpdate', IN_PLACE_UPDATE_REQUIRED_MESSAGE));
  }
  return errs;
}

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

export function validateMachineClass(machineClass: MachineClass): FieldError[] {
  const errs: FieldError[] = [];
  const providerSpec: unknown = machineClass.providerSpec;
  if (providerSpec === undefined || providerSpec === null) errs.push(required('providerSpec'));
  else if (!isPlainObject(providerSpec)) errs.push({ field: 'providerSpec', message: 'must be an object' });

  const nodeTemplate = machineClass.nodeTemplate;
  if (nodeTemplate !== undefined) {
    for (const name of ['instanceType', 'region', 'zone'] as const) {
      if ((nodeTemplate[name] as string | undefined) === undefined)
        errs.push(required(`nodeTemplate.${name}`));
    }
    if ((nodeTemplate.capacity as ResourceList | undefined) === undefined) {
      errs.push(required('nodeTemplate.capacity'));
    }
    errs.push(...nodeTemplateResources(nodeTemplate, { virtualCapacity: true }).problems);
  }
  return errs;
}

export function validateMachine(machine: Machine): FieldError[] {
  return validateMachineSpec(machine.spec, 'spec');
}

export function validateMachineSet(machineSet: MachineSet): FieldError[] {
  const spec = machineSet.spec;
  if (spec === undefined) return [required('spec')];
  return [
    ...nonNegative(spec.replicas, 'spec.replicas'),
    ...nonNegative(spec.minReadySeconds, 'spec.minReadySeconds'),
    ...validateTemplated(spec.selector, spec.template),
  ];
}

export function validateMachineDeployment(machineDeployment: MachineDeployment): FieldError[] {
  const spec = machineDeployment.spec;
  if (spec === undefined) return [required('spec')];
  return [
    ...nonNegative(spec.replicas, 'spec.replicas'),
    ...nonNegative(spec.minReadySeconds, 'spec.minReadySeconds'),
    ...nonNegative(spec.revisionHistoryLimit, 'spec.revisionHistoryLimit'),
    ...nonNegative(spec.progressDeadlineSeconds, 'spec.progressDeadlineSeconds'),
    ...validateStrategy(spec),
    ...validateTemplated(spec.selector, spec.template),
  ];
}

/** One line for logs, events and status conditions: `field: message; field: message`. */
export function formatValidationErrors(errs: readonly FieldError[]): string {
  return errs.map((e) => `${e.field}: ${e.message}`).join('; ');
}
