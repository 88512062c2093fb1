"""verl.interactions (verl up to 0.8; 0.9 dropped the package): base and gsm8k_interaction."""
