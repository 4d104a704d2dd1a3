/**
 * cluster/kubernetes/quorumq.yaml against the Kubernetes API schemas (kubernetes-models: the
 * 1.27 OpenAPI schemas as validators; no cluster runs here), and the settings a quorum
 * system needs there (cluster/kubernetes/README.md says why each).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { Service } from 'kubernetes-models/v1/Service';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';

const root = resolve(import.meta.dirname, '..', '..', '..');
const manifests = parseAllDocuments(readFileSync(join(root, 'cluster/kubernetes/quorumq.yaml'), 'utf8'))
  .map((document) => document.toJS() as Record<string, unknown> | null)
  .filter((document): document is Record<string, unknown> => document !== null);

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Service': Service,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
};

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const find = (kind: string, name: string): Json => {
  const found = manifests.find((m) => m['kind'] === kind && (m['metadata'] as Json)['name'] === name);
  if (found === undefined) throw new Error(`no ${kind} ${name}`);
  return found as Json;
};

describe('cluster/kubernetes/quorumq.yaml', () => {
  it('every object is valid against the Kubernetes API schema of its kind', () => {
    expect(manifests.map((m) => `${m['kind']}/${(m['metadata'] as Json)['name']}`)).toEqual([
      'Service/quorumq-headless',
      'Service/quorumq',
      'PodDisruptionBudget/quorumq',
      'StatefulSet/quorumq',
    ]);
    for (const manifest of manifests) {
      const Model = MODELS[`${manifest['apiVersion']}/${manifest['kind']}`];
      expect(Model, `${manifest['apiVersion']} ${manifest['kind']}`).toBeDefined();
      expect(() => new Model!(manifest as never).validate()).not.toThrow();
    }
  });

  it('the schema check catches a broken manifest (so the test above can fail)', () => {
    const broken = structuredClone(find('StatefulSet', 'quorumq'));
    broken['spec']['template']['spec']['containers'][0]['ports'][0]['containerPort'] = 'seven thousand';
    expect(() => new StatefulSet(broken as never).validate()).toThrow(/containerPort/);
  });

  it('peers find each other before they are ready, start together, and the node id is the pod name', () => {
    const headless = find('Service', 'quorumq-headless');
    expect(headless['spec']['clusterIP']).toBe('None');
    expect(headless['spec']['publishNotReadyAddresses']).toBe(true);
    const set = find('StatefulSet', 'quorumq');
    expect(set['spec']['serviceName']).toBe('quorumq-headless');
    expect(set['spec']['podManagementPolicy']).toBe('Parallel');
    const env = new Map<string, Json>(set['spec']['template']['spec']['containers'][0]['env'].map((e: Json) => [e['name'], e]));
    expect(env.get('QUORUMQ_NODE_ID')?.['valueFrom']).toEqual({ fieldRef: { fieldPath: 'metadata.name' } });
    // One peer per replica, each at its pod's name in the headless Service, on the peer port.
    const replicas = set['spec']['replicas'] as number;
    const peers = String(env.get('QUORUMQ_PEERS')?.['value']).split(',');
    expect(peers).toEqual(Array.from({ length: replicas }, (_, i) => `quorumq-${i}=quorumq-${i}.quorumq-headless:8001`));
  });

  it('readiness is the health check, stopping leaves time for the hand-off, a disruption takes one node at most', () => {
    const pod = find('StatefulSet', 'quorumq')['spec']['template']['spec'];
    const container = pod['containers'][0];
    expect(container['readinessProbe']['exec']['command'].slice(0, 4)).toEqual(['node', 'packages/cli/dist/main.js', 'health', '--address']);
    expect(container['livenessProbe']['exec']).toBeUndefined();
    expect(pod['terminationGracePeriodSeconds']).toBeGreaterThanOrEqual(20);
    expect(find('PodDisruptionBudget', 'quorumq')['spec']['maxUnavailable']).toBe(1);
  });

  it('sets only documented configuration variables', () => {
    const documented = readFileSync(join(root, 'docs/configuration.md'), 'utf8');
    const env = find('StatefulSet', 'quorumq')['spec']['template']['spec']['containers'][0]['env'] as Json[];
    const names = env.map((e) => e['name'] as string);
    expect(names.length).toBeGreaterThan(10);
    for (const name of names) expect(documented, name).toContain(`\`${name}\``);
  });
});
