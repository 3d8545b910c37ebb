// @ts-check
/*
 * ESLint over the TypeScript sources (`npm run lint`, part of `npm run typecheck` and so of `npm test`
 * and `npm run check`): eslint's and typescript-eslint's recommended rules, the latter type-checked
 * against tsconfig.json, so a floating promise or an `any` leaking out of JSON.parse is caught before
 * review. Formatting is prettier's job (.prettierrc.json), not ESLint's: no stylistic rules here.
 * The JavaScript files (jest config, bin/srpo.js, .dependency-cruiser.cjs) are a handful of small
 * CommonJS shims outside tsconfig.json; they are not linted.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['.srpo/**', 'dist/**', 'dist-bench/**', 'node_modules/**', 'coverage/**', '**/fixtures/**', '**/*.js', '**/*.cjs', '**/*.mjs'],
  },
  {
    files: ['{apps,libs,bench,examples,test}/**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // `_`-prefixed names are deliberately unused (a positional parameter an interface requires, a
      // destructured field dropped on purpose); tsc's noUnused* already agree on that convention.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' }],
      // Off for the code base: its Promise-returning interfaces (kafkajs's eachBatch/eachMessage, GroupSource,
      // EventsPublisher, samplers, test doubles) have many implementations that need no await, and `async`
      // there is what turns a throw into the rejection the caller handles. Dropping it would change that path.
      '@typescript-eslint/require-await': 'off',
      // A `let` read (by a callback made before it) ahead of its one assignment stays a `let`: as a const it would be in its TDZ.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    files: ['**/*.spec.ts', '**/*.int-spec.ts', '**/test/**/*.ts'],
    rules: {
      // @types/jest types the asymmetric matchers (expect.any, expect.stringMatching, ...) as `any`, and they go into expected values.
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
    },
  },
);
