"""Pure-Python core of bolt_agent. Nothing in this package imports rclpy."""
