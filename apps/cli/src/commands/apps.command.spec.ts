import { demoEntry } from './apps.command';

describe('srpo demo: which demo runs', () => {
  it('runs the default demo with every argument', () => {
    expect(demoEntry(['--seconds', '90'])).toEqual({ entry: 'agents/src/demo/demo.main.js', args: ['--seconds', '90'] });
  });

  it('--llm, wherever it stands, runs the LLM demo with the other arguments', () => {
    expect(demoEntry(['--llm'])).toEqual({ entry: 'agents/src/llm-demo/llm-demo.main.js', args: [] });
    expect(demoEntry(['--seconds', '120', '--llm', '--until', 'time'])).toEqual({
      entry: 'agents/src/llm-demo/llm-demo.main.js',
      args: ['--seconds', '120', '--until', 'time'],
    });
  });
});
