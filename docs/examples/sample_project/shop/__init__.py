"""A small shop: placing an order schedules its receipt."""
