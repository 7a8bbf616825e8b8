// The CustomResourceDefinitions of machine.sapcloud.io/v1alpha1, as plain apiextensions.k8s.io/v1
// JSON. This module is the single source: hack/gen-crds.ts renders it into the Helm chart, the
// test harness installs it, and a unit test fails when the two drift apart.
//
// Compatibility contract: every object gardener's own CRDs accept and gardener's MCM can act on is
// accepted unchanged. On top of that, admission rejects what MCM's controllers would refuse (or
// crash on) anyway, with messages that name the field and the fix.

import { dumpYaml } from '@kubernetes/client-node';

import { DEFAULT_DEPLOYMENT_STRATEGY } from './constants.js';
import {
  GROUP,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  VERSION,
  type ResourceDescriptor,
} from './types.js';
import {
  BOTH_ZERO_MESSAGE,
  DURATION_MAX_LENGTH,
  DURATION_MESSAGE,
  DURATION_PATTERN,
  INT_OR_PERCENT_MAX_LENGTH,
  INT_OR_PERCENT_MESSAGE,
  IN_PLACE_UPDATE_REQUIRED_MESSAGE,
  LABEL_VALUE_MAX_LENGTH,
  ORCHESTRATION_TYPES,
  ORCHESTRATION_TYPE_REQUIRED_MESSAGE,
  PERCENT_PATTERN,
  QUANTITY_PATTERN,
  ROLLING_UPDATE_REQUIRED_MESSAGE,
  SELECTOR_MATCH_LABELS_MAX,
  SELECTOR_MISMATCH_PREFIX,
  SELECTOR_OPERATORS,
  SELECTOR_VALUES_FORBIDDEN_MESSAGE,
  SELECTOR_VALUES_REQUIRED_MESSAGE,
  STRATEGY_TYPES,
  TAINT_EFFECTS,
  updateFieldRequiredMessage,
} from './validation.js';

// ---------------------------------------------------------------------------------------------
// apiextensions.k8s.io/v1 shapes (wire form; client-node's model classes use other key names)
// ---------------------------------------------------------------------------------------------

export interface ValidationRule {
  rule: string;
  message?: string;
  messageExpression?: string;
  fieldPath?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
}

export interface JSONSchemaProps {
  description?: string;
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  format?: string;
  enum?: string[];
  pattern?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
  maxProperties?: number;
  properties?: Record<string, JSONSchemaProps>;
  additionalProperties?: JSONSchemaProps;
  items?: JSONSchemaProps;
  required?: string[];
  anyOf?: JSONSchemaProps[];
  'x-kubernetes-int-or-string'?: true;
  'x-kubernetes-preserve-unknown-fields'?: true;
  'x-kubernetes-map-type'?: 'atomic' | 'granular';
  'x-kubernetes-list-type'?: 'atomic' | 'set';
  'x-kubernetes-validations'?: ValidationRule[];
  default?: unknown;
}

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

export interface CustomResourceDefinitionVersion {
  name: string;
  served: boolean;
  storage: boolean;
  additionalPrinterColumns?: PrinterColumn[];
  subresources?: {
    status?: Record<string, never>;
    scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
  };
  schema: { openAPIV3Schema: JSONSchemaProps };
}

export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels?: Record<string, string> };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames: string[] };
    scope: 'Namespaced' | 'Cluster';
    versions: CustomResourceDefinitionVersion[];
  };
}

// ---------------------------------------------------------------------------------------------
// Schema building blocks
// ---------------------------------------------------------------------------------------------

type Extra = Omit<JSONSchemaProps, 'description' | 'type' | 'properties'>;

function str(description: string, extra: Extra = {}): JSONSchemaProps {
  return { description, type: 'string', ...extra };
}

function int32(description: string, extra: Extra = {}): JSONSchemaProps {
  return { description, type: 'integer', format: 'int32', ...extra };
}

function int64(description: string, extra: Extra = {}): JSONSchemaProps {
  return { description, type: 'integer', format: 'int64', ...extra };
}

function nonNegativeInt32(description: string, extra: Extra = {}): JSONSchemaProps {
  return int32(description, { minimum: 0, ...extra });
}

/**
 * spec.replicas of sets and deployments: absent means 0, as in gardener MCM (a plain int32 there),
 * and the default makes every stored object say so (kubectl, the scale subresource, readers).
 */
const specReplicas = nonNegativeInt32('Number of machines wanted; 0 when not given.', { default: 0 });

function bool(description: string): JSONSchemaProps {
  return { description, type: 'boolean' };
}

function timestamp(description: string): JSONSchemaProps {
  return str(description, { format: 'date-time' });
}

function obj(
  description: string,
  properties: Record<string, JSONSchemaProps>,
  extra: Extra = {},
): JSONSchemaProps {
  return { description, type: 'object', properties, ...extra };
}

function arr(description: string, items: JSONSchemaProps, extra: Extra = {}): JSONSchemaProps {
  return { description, type: 'array', items, ...extra };
}

function stringMap(description: string, values: Extra = {}): JSONSchemaProps {
  return { description, type: 'object', additionalProperties: { type: 'string', ...values } };
}

/**
 * Label maps. Values are capped at the Kubernetes label-value limit: longer values could never be
 * copied onto a real Machine or Node, and the bound keeps CEL string comparisons cheap.
 */
function labelMap(description: string): JSONSchemaProps {
  return stringMap(description, { maxLength: LABEL_VALUE_MAX_LENGTH });
}

/**
 * The selector's matchLabels are iterated by a CEL rule; without a size bound the apiserver's
 * static cost estimate for that rule exceeds its budget, so they get a generous cap.
 */
function matchLabelsMap(description: string): JSONSchemaProps {
  return { ...labelMap(description), maxProperties: SELECTOR_MATCH_LABELS_MAX };
}

function celString(value: string): string {
  // Patterns here contain neither quotes nor backslashes, so a single-quoted CEL literal is exact.
  if (/['\\]/.test(value)) throw new Error(`cannot embed ${value} in a CEL string literal`);
  return `'${value}'`;
}

function duration(description: string): JSONSchemaProps {
  return str(`${description} Go duration syntax, e.g. "10m", "2h30m".`, {
    maxLength: DURATION_MAX_LENGTH,
    'x-kubernetes-validations': [
      { rule: `self.matches(${celString(DURATION_PATTERN)})`, message: DURATION_MESSAGE },
    ],
  });
}

function intOrPercent(description: string): JSONSchemaProps {
  return {
    description,
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    'x-kubernetes-int-or-string': true,
    maxLength: INT_OR_PERCENT_MAX_LENGTH,
    'x-kubernetes-validations': [
      {
        rule: `type(self) == int ? (self >= 0 && self <= 2147483647) : self.matches(${celString(PERCENT_PATTERN)})`,
        message: INT_OR_PERCENT_MESSAGE,
      },
    ],
  };
}

function quantityMap(description: string): JSONSchemaProps {
  return {
    description,
    type: 'object',
    additionalProperties: {
      anyOf: [{ type: 'integer' }, { type: 'string' }],
      pattern: QUANTITY_PATTERN,
      'x-kubernetes-int-or-string': true,
    },
  };
}

function secretReference(description: string): JSONSchemaProps {
  return obj(
    description,
    {
      name: str('Name of the Secret.'),
      namespace: str('Namespace of the Secret; defaults to the namespace of the referring object.'),
    },
    { 'x-kubernetes-map-type': 'atomic' },
  );
}

function enumString(description: string, values: readonly string[]): JSONSchemaProps {
  return str(description, { enum: [...values] });
}

// ---------------------------------------------------------------------------------------------
// Shared pieces of the machine.sapcloud.io schemas
// ---------------------------------------------------------------------------------------------

const apiVersionProp = str('Versioned schema of this object, here machine.sapcloud.io/v1alpha1.');
const kindProp = str('REST resource kind of this object.');
// The apiserver owns metadata's schema and rejects anything beyond the type here (even a description).
const metadataProp: JSONSchemaProps = { type: 'object' };

function templateMetadata(description: string): JSONSchemaProps {
  return obj(
    description,
    {
      labels: labelMap('Labels to put on every object created from this template.'),
      annotations: stringMap('Annotations to put on every object created from this template.'),
    },
    { 'x-kubernetes-preserve-unknown-fields': true },
  );
}

function classSpec(description: string, requireReference: boolean): JSONSchemaProps {
  const reference = requireReference ? { minLength: 1 } : {};
  return obj(
    description,
    {
      apiGroup: str('API group of the class, normally machine.sapcloud.io.'),
      kind: str('Kind of the class, normally MachineClass.', reference),
      name: str('Name of the class in the same namespace.', reference),
    },
    requireReference ? { required: ['kind', 'name'] } : {},
  );
}

const taintSchema = obj(
  'A taint to place on the node.',
  {
    key: str('Taint key.'),
    value: str('Taint value.'),
    effect: enumString('What the taint does to pods that do not tolerate it.', TAINT_EFFECTS),
    timeAdded: timestamp('When the taint was added; only meaningful for NoExecute taints.'),
  },
  { required: ['effect', 'key'] },
);

const nodeSpecSchema = obj('Node spec fields to apply to the node. Only taints are acted on.', {
  configSource: obj('Deprecated dynamic kubelet configuration source; kept for compatibility.', {
    configMap: obj(
      'ConfigMap holding the kubelet configuration.',
      {
        kubeletConfigKey: str('Key in the ConfigMap that holds the kubelet configuration.'),
        name: str('Name of the ConfigMap.'),
        namespace: str('Namespace of the ConfigMap.'),
        resourceVersion: str('Resource version of the ConfigMap.'),
        uid: str('UID of the ConfigMap.'),
      },
      { required: ['kubeletConfigKey', 'name', 'namespace'] },
    ),
  }),
  externalID: str('Deprecated external ID of the node.'),
  podCIDR: str('Pod IP range assigned to the node.'),
  podCIDRs: arr(
    'Pod IP ranges assigned to the node, at most one per IP family.',
    str('An IP range in CIDR notation.'),
    {
      'x-kubernetes-list-type': 'set',
    },
  ),
  providerID: str('Cloud provider ID of the node.'),
  taints: arr('Taints kept on the node; the machine controller adds and removes them.', taintSchema, {
    'x-kubernetes-list-type': 'atomic',
  }),
  unschedulable: bool('Whether new pods may not be scheduled onto the node.'),
});

const nodeTemplateSpecSchema = obj('Metadata and taints kept on the machine’s node.', {
  metadata: obj(
    'Labels and annotations kept on the node.',
    {
      labels: labelMap('Labels kept on the node.'),
      annotations: stringMap('Annotations kept on the node.'),
    },
    { 'x-kubernetes-preserve-unknown-fields': true },
  ),
  spec: nodeSpecSchema,
});

/** MachineConfiguration is inlined into MachineSpec, so these become siblings of `class`. */
const machineConfigurationProps: Record<string, JSONSchemaProps> = {
  drainTimeout: duration('How long to drain the node before the machine is deleted anyway.'),
  healthTimeout: duration('How long the node may be unhealthy before the machine is declared Failed.'),
  creationTimeout: duration('How long the node may take to join before the machine is declared Failed.'),
  inPlaceUpdateTimeout: duration('How long an in-place update may take before it is declared failed.'),
  machinePreserveTimeout: duration('How long a preserved machine is kept.'),
  disableHealthTimeout: bool(
    'Never declare the machine Failed for being unhealthy (meant for in-place updates).',
  ),
  maxEvictRetries: int32('How often evicting a pod is retried while draining.'),
  nodeConditions: str('Comma-separated node condition types that make the node count as unhealthy.'),
};

function machineSpecSchema(description: string): JSONSchemaProps {
  return obj(
    description,
    {
      class: classSpec('The MachineClass the machine is created from.', true),
      providerID: str('Cloud provider ID of the machine’s VM; set by the machine controller.'),
      nodeTemplate: nodeTemplateSpecSchema,
      ...machineConfigurationProps,
    },
    { required: ['class'] },
  );
}

function machineTemplateSchema(description: string): JSONSchemaProps {
  return obj(
    description,
    {
      metadata: templateMetadata('Metadata of the machines created from this template.'),
      spec: machineSpecSchema('Spec of the machines created from this template.'),
    },
    { required: ['spec'] },
  );
}

const selectorRequirementSchema = obj(
  'A label requirement: key, operator and values.',
  {
    key: str('Label key the requirement applies to.'),
    operator: enumString('How the key relates to the values.', SELECTOR_OPERATORS),
    values: arr(
      'Values for In and NotIn; must be empty for Exists and DoesNotExist.',
      str('A label value.'),
      {
        'x-kubernetes-list-type': 'atomic',
      },
    ),
  },
  {
    required: ['key', 'operator'],
    'x-kubernetes-validations': [
      {
        rule: "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
        message: SELECTOR_VALUES_REQUIRED_MESSAGE,
        fieldPath: '.values',
      },
      {
        rule: "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
        message: SELECTOR_VALUES_FORBIDDEN_MESSAGE,
        fieldPath: '.values',
      },
    ],
  },
);

const labelSelectorSchema = obj(
  'Label selector of the machines this object owns. An empty selector selects nothing.',
  {
    matchLabels: matchLabelsMap('Labels a machine must carry, with these exact values.'),
    matchExpressions: arr('Further label requirements, all of which must hold.', selectorRequirementSchema, {
      'x-kubernetes-list-type': 'atomic',
    }),
  },
  { 'x-kubernetes-map-type': 'atomic' },
);

// CEL: every matchLabels pair must appear with the same value in the template's labels.
const TEMPLATE_LABELS_PRESENT =
  'has(self.template) && has(self.template.metadata) && has(self.template.metadata.labels)';
const LABEL_MATCHES = `${TEMPLATE_LABELS_PRESENT} && k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k]`;

// The message names one offending pair. Listing all of them (map/join) is beyond the apiserver's
// static cost budget for message expressions, so the first mismatch is looked up twice instead.
const FIRST_UNMATCHED_KEY = `self.selector.matchLabels.filter(k, !(${LABEL_MATCHES}))[0]`;

const selectorMatchesTemplateRule: ValidationRule = {
  rule: `!has(self.selector) || !has(self.selector.matchLabels) || self.selector.matchLabels.all(k, ${LABEL_MATCHES})`,
  messageExpression: `'${SELECTOR_MISMATCH_PREFIX}: the template lacks ' + ${FIRST_UNMATCHED_KEY} + '=' + self.selector.matchLabels[${FIRST_UNMATCHED_KEY}]`,
  fieldPath: '.selector.matchLabels',
};

const lastOperationSchema = obj('The last operation performed on the machine.', {
  description: str('Human-readable account of the operation.'),
  errorCode: str('Name of the machine error code the provider returned, if any.'),
  lastUpdateTime: timestamp('When the operation was last updated.'),
  state: str('State of the operation: Processing, Failed or Successful.'),
  type: str('Kind of operation: Create, Update, InPlaceUpdate, DrainNode, HealthCheck or Delete.'),
});

const machineSummarySchema = obj('A failed machine.', {
  name: str('Name of the machine.'),
  providerID: str('Cloud provider ID of the machine.'),
  lastOperation: lastOperationSchema,
  ownerRef: str('Name of the object controlling the machine.'),
});

const failedMachinesSchema = arr('Machines whose last operation failed.', machineSummarySchema);

const labelSelectorStatus = str(
  'The spec.selector in label-selector string form, served as status.selector by the scale subresource. ' +
    'Not part of gardener MCM; written by this controller manager.',
);

function conditionSchema(description: string, withUpdateTime: boolean): JSONSchemaProps {
  const props: Record<string, JSONSchemaProps> = {
    type: str('Type of the condition.'),
    status: str('Status of the condition: True, False or Unknown.'),
    ...(withUpdateTime ? { lastUpdateTime: timestamp('When the condition was last updated.') } : {}),
    lastTransitionTime: timestamp('When the status last changed.'),
    reason: str('Machine-readable reason for the last transition.'),
    message: str('Human-readable details of the last transition.'),
  };
  return obj(description, props, { required: ['status', 'type'] });
}

function strategyBlockRules(type: string, block: 'rollingUpdate' | 'inPlaceUpdate', blockMessage: string) {
  const when = `!has(self.type) || self.type != '${type}'`;
  const rules: ValidationRule[] = [
    { rule: `${when} || has(self.${block})`, message: blockMessage, fieldPath: `.${block}` },
  ];
  for (const name of ['maxSurge', 'maxUnavailable']) {
    rules.push({
      rule: `${when} || !has(self.${block}) || has(self.${block}.${name})`,
      message: updateFieldRequiredMessage(block, name),
      fieldPath: `.${block}.${name}`,
    });
  }
  return rules;
}

const IS_ZERO = (field: string): string =>
  `(type(self.${field}) == int ? self.${field} == 0 : self.${field}.matches('^0+%$'))`;

const bothZeroRule: ValidationRule = {
  rule: `!has(self.maxSurge) || !has(self.maxUnavailable) || !(${IS_ZERO('maxSurge')} && ${IS_ZERO('maxUnavailable')})`,
  message: BOTH_ZERO_MESSAGE,
};

const updateConfigurationProps: Record<string, JSONSchemaProps> = {
  maxSurge: intOrPercent(
    'How many machines may exist above the desired replicas during the update: a number or a percentage of ' +
      'the replicas, rounded up.',
  ),
  maxUnavailable: intOrPercent(
    'How many machines may be unavailable during the update: a number or a percentage of the replicas, ' +
      'rounded down. If both this and maxSurge resolve to 0, one machine may be unavailable.',
  ),
};

const strategySchema = obj(
  'How machines are replaced when the template changes. Without one, RollingUpdate with maxSurge 1 and ' +
    'maxUnavailable 0.',
  {
    type: enumString(
      'Recreate removes all old machines before creating new ones; RollingUpdate replaces them gradually; ' +
        'InPlaceUpdate updates the existing machines’ nodes in place.',
      STRATEGY_TYPES,
    ),
    rollingUpdate: obj('Bounds of a RollingUpdate.', updateConfigurationProps, {
      'x-kubernetes-validations': [bothZeroRule],
    }),
    inPlaceUpdate: obj(
      'Bounds and orchestration of an InPlaceUpdate.',
      {
        ...updateConfigurationProps,
        orchestrationType: enumString(
          'Auto lets the controller pick the nodes to update; Manual leaves the selection to the user.',
          ORCHESTRATION_TYPES,
        ),
      },
      { 'x-kubernetes-validations': [bothZeroRule] },
    ),
  },
  {
    required: ['type'],
    default: DEFAULT_DEPLOYMENT_STRATEGY,
    'x-kubernetes-validations': [
      ...strategyBlockRules('RollingUpdate', 'rollingUpdate', ROLLING_UPDATE_REQUIRED_MESSAGE),
      ...strategyBlockRules('InPlaceUpdate', 'inPlaceUpdate', IN_PLACE_UPDATE_REQUIRED_MESSAGE),
      {
        rule: "!has(self.type) || self.type != 'InPlaceUpdate' || !has(self.inPlaceUpdate) || has(self.inPlaceUpdate.orchestrationType)",
        message: ORCHESTRATION_TYPE_REQUIRED_MESSAGE,
        fieldPath: '.inPlaceUpdate.orchestrationType',
      },
    ],
  },
);

// ---------------------------------------------------------------------------------------------
// Root schemas
// ---------------------------------------------------------------------------------------------

const machineClassSchema = obj(
  'Provider configuration shared by machines: which driver, its provider-specific settings, the secrets it ' +
    'needs and what the resulting nodes look like. MachineClass has no spec; its fields are top-level.',
  {
    apiVersion: apiVersionProp,
    kind: kindProp,
    metadata: metadataProp,
    provider: str('Name of the driver that handles this class, e.g. "local".'),
    providerSpec: {
      description: 'Provider-specific machine configuration, passed to the driver as is.',
      type: 'object',
      'x-kubernetes-preserve-unknown-fields': true,
    },
    secretRef: secretReference('Secret with the user data (and possibly credentials) for new machines.'),
    credentialsSecretRef: secretReference(
      'Optional Secret with provider credentials only; its keys win over secretRef’s on a clash.',
    ),
    nodeTemplate: obj(
      'What a node of this class looks like, so the cluster-autoscaler can scale a group up from zero.',
      {
        capacity: quantityMap('Resources a node of this class offers.'),
        virtualCapacity: quantityMap('Extended resources copied into the node’s capacity.'),
        allocatable: quantityMap(
          'Addition to MCM: resources a node of this class offers to pods (capacity less what the kubelet reserves); resources not named are allocatable in full. Must not exceed capacity or virtualCapacity.',
        ),
        instanceType: str('Instance type of the nodes.'),
        region: str('Region the nodes run in.'),
        zone: str('Zone the nodes run in.'),
        architecture: str('CPU architecture of the nodes, e.g. amd64 or arm64.'),
      },
      {
        required: ['capacity', 'instanceType', 'region', 'zone'],
        'x-kubernetes-preserve-unknown-fields': true,
      },
    ),
  },
  { required: ['providerSpec'] },
);

const machineSchema = obj(
  'One VM (and its node) created from a MachineClass.',
  {
    apiVersion: apiVersionProp,
    kind: kindProp,
    metadata: metadataProp,
    spec: machineSpecSchema('Desired state of the machine.'),
    status: obj('Observed state of the machine.', {
      addresses: arr(
        'Addresses of the machine; only filled when running without a target cluster.',
        obj(
          'An address of the machine.',
          { address: str('The address.'), type: str('Address type, e.g. InternalIP or Hostname.') },
          { required: ['address', 'type'] },
        ),
      ),
      conditions: arr('Conditions of the machine’s node.', conditionSchema('A node condition.', false)),
      currentStatus: obj('Current phase of the machine.', {
        phase: str('Lifecycle phase, e.g. Pending, Running, Failed or Terminating.'),
        timeoutActive: bool('Whether a creation or health timeout is being tracked.'),
        lastUpdateTime: timestamp('When the phase was last updated.'),
        preserveExpiryTime: timestamp('When preservation of this machine ends, if it is preserved.'),
      }),
      lastOperation: lastOperationSchema,
      lastKnownState: str('Opaque state the driver keeps between calls.'),
      deletionStep: str(
        'Addition of this implementation: the step of the deletion flow reached so far (GetVMStatus, DrainNode, DeleteVM, DeleteNode, RemoveFinalizer).',
      ),
    }),
  },
  { required: ['spec'] },
);

const machineSetSchema = obj(
  'Keeps a number of identical machines running.',
  {
    apiVersion: apiVersionProp,
    kind: kindProp,
    metadata: metadataProp,
    spec: obj(
      'Desired state of the machine set.',
      {
        replicas: specReplicas,
        selector: labelSelectorSchema,
        machineClass: classSpec('Legacy class reference; unused, the template’s class counts.', false),
        template: machineTemplateSchema('Template of the machines to create.'),
        minReadySeconds: nonNegativeInt32(
          'Seconds a new machine should be ready before it counts as available.',
        ),
        autoPreserveFailedMachineMax: int32('How many failed machines may be preserved automatically.'),
      },
      { required: ['selector', 'template'], 'x-kubernetes-validations': [selectorMatchesTemplateRule] },
    ),
    status: obj('Observed state of the machine set.', {
      replicas: int32('Number of machines owned, including terminating ones.'),
      fullyLabeledReplicas: int32('Machines carrying all labels of the template.'),
      readyReplicas: int32('Machines in phase Running.'),
      availableReplicas: int32('Machines in phase Running or Available.'),
      preservedFailedReplicas: int32('Failed machines kept because they are preserved.'),
      observedGeneration: int64('Generation of the spec this status describes.'),
      machineSetCondition: arr(
        'Conditions of the machine set.',
        conditionSchema('A machine set condition.', false),
      ),
      lastOperation: lastOperationSchema,
      failedMachines: failedMachinesSchema,
      autoPreserveFailedMachineCount: int32('Machines currently preserved automatically.'),
      labelSelector: labelSelectorStatus,
    }),
  },
  { required: ['spec'] },
);

const machineDeploymentSchema = obj(
  'Declarative updates for machines through machine sets, like a Deployment for pods.',
  {
    apiVersion: apiVersionProp,
    kind: kindProp,
    metadata: metadataProp,
    spec: obj(
      'Desired state of the machine deployment.',
      {
        replicas: specReplicas,
        selector: labelSelectorSchema,
        template: machineTemplateSchema(
          'Template of the machines. Changing its metadata or class name rolls the machines; node template and ' +
            'timeouts are updated in place.',
        ),
        strategy: strategySchema,
        minReadySeconds: nonNegativeInt32(
          'Seconds a new machine should be ready before it counts as available.',
        ),
        revisionHistoryLimit: nonNegativeInt32('How many old machine sets to keep; unset keeps all.'),
        paused: bool('Stops rollouts (scaling still happens).'),
        rollbackTo: obj('Deprecated: roll back to this revision, then the field is cleared.', {
          revision: int64('Revision to roll back to; 0 means the previous one.'),
        }),
        progressDeadlineSeconds: nonNegativeInt32(
          'Seconds a rollout may make no progress before it is reported as failed; unset means no deadline.',
        ),
        autoPreserveFailedMachineMax: int32('How many failed machines may be preserved automatically.'),
      },
      {
        required: ['selector', 'template'],
        'x-kubernetes-validations': [selectorMatchesTemplateRule],
      },
    ),
    status: obj('Observed state of the machine deployment.', {
      observedGeneration: int64('Generation of the spec this status describes.'),
      replicas: int32('Machines owned through all machine sets.'),
      updatedReplicas: int32('Machines of the current template.'),
      readyReplicas: int32('Machines in phase Running.'),
      availableReplicas: int32('Machines in phase Running or Available.'),
      preservedFailedReplicas: int32('Failed machines kept because they are preserved.'),
      unavailableReplicas: int32('Desired machines that are not available.'),
      conditions: arr(
        'Conditions of the machine deployment.',
        conditionSchema('A machine deployment condition.', true),
      ),
      collisionCount: int32('Counts machine set name collisions; part of the next machine set’s name hash.'),
      failedMachines: failedMachinesSchema,
      labelSelector: labelSelectorStatus,
    }),
  },
  { required: ['spec'] },
);

// ---------------------------------------------------------------------------------------------
// Printer columns
// ---------------------------------------------------------------------------------------------

const AGE: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' };

const machineColumns: PrinterColumn[] = [
  {
    name: 'Status',
    type: 'string',
    jsonPath: '.status.currentStatus.phase',
    description: 'Lifecycle phase.',
  },
  AGE,
  { name: 'Node', type: 'string', jsonPath: '.metadata.labels.node', description: 'Backing node.' },
  { name: 'ProviderID', type: 'string', jsonPath: '.spec.providerID', priority: 1 },
  { name: 'Class', type: 'string', jsonPath: '.spec.class.name', priority: 1 },
  { name: 'Last-Op', type: 'string', jsonPath: '.status.lastOperation.type', priority: 1 },
  { name: 'Op-State', type: 'string', jsonPath: '.status.lastOperation.state', priority: 1 },
];

const machineSetColumns: PrinterColumn[] = [
  { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas' },
  { name: 'Current', type: 'integer', jsonPath: '.status.replicas' },
  { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
  { name: 'Available', type: 'integer', jsonPath: '.status.availableReplicas' },
  AGE,
  { name: 'Class', type: 'string', jsonPath: '.spec.template.spec.class.name', priority: 1 },
  { name: 'Frozen', type: 'string', jsonPath: '.metadata.labels.freeze', priority: 1 },
];

const machineDeploymentColumns: PrinterColumn[] = [
  { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
  { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas' },
  { name: 'Up-to-date', type: 'integer', jsonPath: '.status.updatedReplicas' },
  { name: 'Available', type: 'integer', jsonPath: '.status.availableReplicas' },
  AGE,
  { name: 'Strategy', type: 'string', jsonPath: '.spec.strategy.type', priority: 1 },
  { name: 'Paused', type: 'boolean', jsonPath: '.spec.paused', priority: 1 },
  { name: 'Class', type: 'string', jsonPath: '.spec.template.spec.class.name', priority: 1 },
];

const machineClassColumns: PrinterColumn[] = [
  { name: 'Provider', type: 'string', jsonPath: '.provider' },
  AGE,
  { name: 'InstanceType', type: 'string', jsonPath: '.nodeTemplate.instanceType', priority: 1 },
  { name: 'Region', type: 'string', jsonPath: '.nodeTemplate.region', priority: 1 },
  { name: 'Zone', type: 'string', jsonPath: '.nodeTemplate.zone', priority: 1 },
];

// ---------------------------------------------------------------------------------------------
// CRDs
// ---------------------------------------------------------------------------------------------

const SCALE = {
  specReplicasPath: '.spec.replicas',
  statusReplicasPath: '.status.replicas',
  labelSelectorPath: '.status.labelSelector',
};

function crd(
  resource: ResourceDescriptor,
  schema: JSONSchemaProps,
  columns: PrinterColumn[],
  subresources: CustomResourceDefinitionVersion['subresources'],
): CustomResourceDefinition {
  const version: CustomResourceDefinitionVersion = {
    name: VERSION,
    served: true,
    storage: true,
    additionalPrinterColumns: columns,
    ...(subresources === undefined ? {} : { subresources }),
    schema: { openAPIV3Schema: schema },
  };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${resource.plural}.${GROUP}` },
    spec: {
      group: GROUP,
      names: {
        kind: resource.kind,
        listKind: resource.listKind,
        plural: resource.plural,
        singular: resource.singular,
        shortNames: [resource.shortName],
      },
      scope: 'Namespaced',
      versions: [version],
    },
  };
}

export const machineClassCRD = crd(MachineClassResource, machineClassSchema, machineClassColumns, undefined);
export const machineCRD = crd(MachineResource, machineSchema, machineColumns, { status: {} });
export const machineSetCRD = crd(MachineSetResource, machineSetSchema, machineSetColumns, {
  status: {},
  scale: SCALE,
});
export const machineDeploymentCRD = crd(
  MachineDeploymentResource,
  machineDeploymentSchema,
  machineDeploymentColumns,
  {
    status: {},
    scale: SCALE,
  },
);

export const allCRDs: readonly CustomResourceDefinition[] = [
  machineClassCRD,
  machineCRD,
  machineSetCRD,
  machineDeploymentCRD,
];

// ---------------------------------------------------------------------------------------------
// YAML rendering
// ---------------------------------------------------------------------------------------------

export const CRD_YAML_HEADER = '# Generated by hack/gen-crds.ts from lib/api/crds.ts; do not edit.\n';

/** Directory of the chart's CRDs, relative to the repository root. */
export const CRD_CHART_DIR = 'charts/machine-controller-manager/crds';

export function crdFileName(definition: CustomResourceDefinition): string {
  return `${definition.spec.group}_${definition.spec.names.plural}.yaml`;
}

/**
 * Renders one CRD as YAML. client-node's dumpYaml routes any object carrying apiVersion and kind
 * through its model serializer, which expects camelCase model keys and would silently drop the
 * `x-kubernetes-*` and `enum` keys of this wire-form JSON. Dumping the envelope and the body
 * separately keeps it a plain YAML dump. noRefs: the schemas share sub-objects, which must be
 * written out in full rather than as YAML anchors.
 */
export function crdYaml(definition: CustomResourceDefinition): string {
  const { apiVersion, kind, ...body } = definition;
  const options = { noRefs: true, lineWidth: -1 };
  return (
    CRD_YAML_HEADER +
    dumpYaml({ apiVersion }, options) +
    dumpYaml({ kind }, options) +
    dumpYaml(body, options)
  );
}

/** File name → YAML text of every CRD, exactly as the chart must contain them. */
export function crdYamlFiles(): Map<string, string> {
  return new Map(allCRDs.map((definition) => [crdFileName(definition), crdYaml(definition)]));
}
