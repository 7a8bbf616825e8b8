// @ts-check
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'coverage/**',
      'node_modules/**',
      'charts/**',
      'eslint.config.js',
      'test/summary-reporter.cjs',
      'test/summary.cjs',
    ],
  },
  eslint.configs.recommended,
  tseslint.configs.strictTypeChecked,
  tseslint.configs.stylisticTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        // The build's plain-JavaScript step (it runs before tsc has compiled anything).
        projectService: { allowDefaultProject: ['hack/*.mjs'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': 'error',
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': 'error',
      // The conventions prefer an explicit check or cast over a non-null assertion.
      '@typescript-eslint/non-nullable-type-assertion-style': 'off',
    },
  },
  {
    // The manager takes the AWS SDK from its bundle (lib/providers/aws/sdk-entry.ts lists what it
    // holds); the image installs no SDK package. Types vanish at compile time and stay allowed.
    files: ['cmd/**/*.ts', 'lib/**/*.ts'],
    ignores: ['lib/providers/aws/sdk-entry.ts', 'lib/providers/aws/sqs-entry.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['@aws-sdk/*', '@smithy/*'],
              allowTypeImports: true,
              message:
                'lib/ takes AWS SDK values from the bundle: export them in lib/providers/aws/sdk-entry.ts (EC2) or sqs-entry.ts (SQS) and reach them through client.ts or interruption/queue.ts.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'hack/**/*.ts'],
    rules: {
      // chai's expect(...).to.be.true style is a property access expression.
      '@typescript-eslint/no-unused-expressions': 'off',
      // Fakes return the caller's expected type (peek<T>()), a deliberate test convenience.
      '@typescript-eslint/no-unnecessary-type-parameters': 'off',
      'no-console': 'off',
    },
  },
  prettier,
);
