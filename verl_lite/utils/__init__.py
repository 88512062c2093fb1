"""Small shared helpers: device selection, seeding, logging."""
