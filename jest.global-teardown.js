// Stops only what the tests themselves started (marked in .srpo/test-started/).
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

module.exports = async () => {
  const dir = path.join(__dirname, '.srpo', 'test-started');
  const scripts = { kafka: ['kafka', 'kafka.sh'], postgres: ['postgres', 'postgres.sh'] };
  for (const [what, parts] of Object.entries(scripts)) {
    const marker = path.join(dir, what);
    if (!fs.existsSync(marker)) continue;
    try {
      execFileSync('bash', [path.join(__dirname, 'infra', ...parts), 'stop'], { stdio: 'inherit' });
    } finally {
      fs.rmSync(marker, { force: true });
    }
  }
};
