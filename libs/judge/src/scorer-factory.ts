import type { JudgeClientOptions } from './judge-client';
import { JudgeClient } from './judge-client';
import type { JudgeConfig } from './judge-config';
import type { Scorer } from './judge-input';
import { HttpReward, ModuleReward } from './reward-plugins';
import { RubricJudge } from './rubric-judge';
import { RubricTemplate } from './rubric-template';

/** The scorer `config.source` names: the rubric judge on its endpoint, a reward module or a reward endpoint. */
export function createScorer(config: Pick<JudgeConfig, 'source' | 'timeoutMs' | 'concurrency'>): Scorer {
  const source = config.source;
  switch (source.kind) {
    case 'module':
      return ModuleReward.fromFile(source.file);
    case 'http':
      return new HttpReward(source.url, config.timeoutMs, source.apiKey, config.concurrency);
    case 'judge': {
      const options: JudgeClientOptions = {
        baseUrl: source.baseUrl,
        model: source.model,
        apiKey: source.apiKey,
        timeoutMs: config.timeoutMs,
        concurrency: config.concurrency,
        maxTokens: source.maxTokens,
        temperature: source.temperature,
      };
      const client = new JudgeClient(options);
      return new RubricJudge({
        client,
        rubric: RubricTemplate.fromFile(source.rubricFile),
        model: source.model,
        range: source.range,
        endpointHost: client.endpointHost,
      });
    }
  }
}
