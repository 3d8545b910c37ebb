// @ts-check
/*
 * The repository's layering, checked on the sources by dependency-cruiser (`npm run lint:deps`,
 * part of `npm run typecheck` and so of `npm test` and `npm run check`). What it cannot say (the
 * processors use no kafkajs and no wall clock; libs/srpo is pure math) stays in apps/boundaries.spec.ts.
 *
 * The libs' tiers, lowest first: a lib imports only libs of lower tiers (never a peer of its own
 * tier, never one above). `@srpo/<lib>` resolves to libs/<lib>/src through tsconfig.json's paths,
 * so an alias and a relative path into another lib are the same edge.
 */
const LIB_TIERS = [
  ['core'],
  ['events', 'srpo'],
  ['kernels', 'store', 'streams'],
  ['policy', 'materializer'],
  ['hf'],
  ['serving', 'trainer', 'judge'],
  ['offline'],
  ['workflows', 'audit'],
];

/** A lib's product sources: libs/<lib>/src without specs and test/ folders. */
const NOT_SPEC_OR_TEST = '\\.(int-)?spec\\.ts$|(^|/)test/';
/** Product sources: apps/<app>/src and libs/<lib>/src, without specs, test/ folders and libs/testing. */
const PRODUCT = '^(apps|libs)/[^/]+/src/';
const NOT_PRODUCT = `${NOT_SPEC_OR_TEST}|^libs/testing/`;

const any = (names) => `(${names.join('|')})`;

const tierRules = LIB_TIERS.map((tier, i) => ({
  name: `lib-layering-${tier.join('-')}`,
  comment: `libs/${any(tier)} may import only libs of lower tiers (${LIB_TIERS.slice(0, i).flat().join(', ') || 'none'}); tiers: ${LIB_TIERS.map((t) => t.join('/')).join(' < ')}`,
  severity: 'error',
  from: { path: `^libs/${any(tier)}/src/`, pathNot: NOT_SPEC_OR_TEST },
  to: { path: `^libs/${any(LIB_TIERS.slice(i).flat())}/`, pathNot: '^libs/$1/' },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-app-to-other-app',
      comment: 'apps are leaves: an app (its src and its tests) imports no other app',
      severity: 'error',
      from: { path: '^apps/([^/]+)/' },
      to: { path: '^apps/', pathNot: '^apps/$1/' },
    },
    {
      name: 'no-lib-to-app',
      comment: 'libs import no app',
      severity: 'error',
      from: { path: '^libs/' },
      to: { path: '^apps/' },
    },
    {
      name: 'no-product-to-test-code',
      comment: 'product sources import no bench/, examples/, test/ folder, spec, libs/testing (@srpo/testing), @srpo/kernels/testing or @srpo/policy/testing',
      severity: 'error',
      from: { path: PRODUCT, pathNot: NOT_PRODUCT },
      to: {
        path: [
          '^(bench|examples|test)/',
          '(^|/)test/',
          '\\.(int-)?spec\\.ts$',
          '^libs/testing/',
          '^@srpo/testing(/|$)',
          '^@srpo/kernels/testing(/|$)',
          '^@srpo/policy/testing(/|$)',
        ],
      },
    },
    {
      name: 'no-product-to-kernel-tuning',
      comment: 'the A/B and tuning switches (@srpo/kernels/tuning) are for benches and specs only',
      severity: 'error',
      from: { path: PRODUCT, pathNot: NOT_PRODUCT },
      to: { path: ['^@srpo/kernels/tuning(/|$)', '^libs/kernels/src/tuning(\\.ts)?$'] },
    },
    {
      name: 'no-circular-between-libs',
      comment: 'no cycle of imports that passes through two libs',
      severity: 'error',
      from: { path: '^libs/([^/]+)/' },
      to: { circular: true, via: { path: '^libs/', pathNot: '^libs/$1/' } },
    },
    ...tierRules,
    {
      name: 'kernels-imports-only-core-srpo',
      comment: '@srpo/kernels (the native addon and its binding) sits on @srpo/core and @srpo/srpo only',
      severity: 'error',
      from: { path: '^libs/kernels/src/', pathNot: NOT_SPEC_OR_TEST },
      to: { path: '^libs/', pathNot: '^libs/(kernels|core|srpo)/' },
    },
    {
      name: 'policy-imports-only-core-srpo-kernels',
      comment: '@srpo/policy sits on @srpo/core, @srpo/srpo and @srpo/kernels; @srpo/hf registers its model family into it, never the reverse',
      severity: 'error',
      from: { path: '^libs/policy/src/', pathNot: NOT_SPEC_OR_TEST },
      to: { path: '^libs/', pathNot: '^libs/(policy|core|srpo|kernels)/' },
    },
    {
      name: 'no-unresolvable-srpo-alias',
      comment: 'an @srpo/ import that tsconfig.json paths do not resolve would escape every rule above',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true, path: '^@srpo/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist|dist-bench|coverage)/' },
    // Type-only imports are dependencies too (the old regex check counted them).
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.json', '.node'] },
  },
};
